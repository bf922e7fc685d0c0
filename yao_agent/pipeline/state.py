"""What a run is asked to do (`RunRequest`), what it is (`RunContext`), and what it knows while it runs
(`RunState`)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from yao_agent.connectors.resolve import KnownRoles
from yao_agent.dsl.specs import AssistantSpec, ConnectorSpec, Guardrails
from yao_agent.errors import DelegateError
from yao_agent.events import Event
from yao_agent.hooks.host import RunSpend
from yao_agent.identity import Identity
from yao_agent.messages import ChatMessage, ToolCall
from yao_agent.metering.usage import RunUsage
from yao_agent.pipeline.answers import Delegation
from yao_agent.pipeline.buffer import Buffer
from yao_agent.pipeline.channel import EventChannel
from yao_agent.pipeline.options import RunOptions
from yao_agent.pipeline.outcomes import Wait
from yao_agent.store.records import Approval, ResumePoint, Rewind, RunRecord, StepRecord
from yao_agent.tools import Offer
from yao_agent.vocabulary import OnBusy

if TYPE_CHECKING:
    from yao_agent.shapes import ReferenceOut


@dataclass(frozen=True)
class RunRequest:
    assistant_id: str
    identity: Identity | None
    messages: Sequence[Mapping[str, Any]] = ()  # OpenAI-shaped input, validated by the permission stage
    chat_id: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict[str, Any])
    locale: str = "en"
    on_busy: OnBusy | None = None
    resume: ResumePoint | None = None
    # Call options over the assistant's (temperature, ...: RUN_CALL_OPTIONS, connectors/request.py).
    options: Mapping[str, Any] = field(default_factory=dict[str, Any])
    # True: `chat_id` must name one of the caller's chats (over HTTP the server names new ones); False:
    # a chat of that id is started if there is none (the CLI's `--chat ID`).
    chat_must_exist: bool = False
    traceparent: str | None = (
        None  # the caller's W3C trace context: the run joins its trace (yao_agent/observe/tracing.py)
    )
    # Tools the client brought (OpenAI function tools) and its tool_choice (pipeline/client_tools.py).
    client_tools: Sequence[Mapping[str, Any]] = ()
    tool_choice: str | Mapping[str, Any] | None = None
    # The client's results for the calls the run it resumes waits for: call id → the result's text.
    client_results: Mapping[str, str] = field(default_factory=dict[str, str])
    # A regeneration or an edit: the end of the chat this run replaces (an earlier version from then on).
    rewind: Rewind | None = None


class ChildRuns(Protocol):
    """How a run starts a child run (a hook's `delegate` or `ctx.call`): handed to the run by the stage
    that drives it, so the modules a hook reaches never import the turn loop back. A hand-over (or its
    resume) gives the child's `Wait` when the child stopped for a person's approval, else None."""

    async def hand_over(self, state: RunState, target: Delegation) -> Wait | None: ...
    async def call(self, state: RunState, assistant_id: str, messages: Any) -> dict[str, Any]: ...
    async def resume(self, parent: RunState, target: StepRecord) -> Wait | None: ...


class _NoChildren:
    """Until the driving stage hands a run its child runner (a run state made outside a run)."""

    async def hand_over(self, state: RunState, target: Delegation) -> Wait | None:
        raise DelegateError("this run cannot start child runs")

    async def call(self, state: RunState, assistant_id: str, messages: Any) -> dict[str, Any]:
        raise DelegateError("this run cannot start child runs")

    async def resume(self, parent: RunState, target: StepRecord) -> Wait | None:
        raise DelegateError("this run cannot start child runs")


@dataclass(frozen=True, slots=True)
class RunContext:
    """What a run (or child run) is, fixed from its start: who asks, which assistant, where it streams
    and stores. The objects it holds change (the run record's outcome, the buffer's contents); which
    objects they are does not."""

    request: RunRequest
    identity: Identity
    assistant: AssistantSpec
    run: RunRecord
    out: EventChannel
    buffer: Buffer
    started_mono: float
    thread_id: str | None = None  # a child run's stack id; None for the root
    depth: int = 0  # how deeply delegated (0 = root)
    hidden: bool = False  # a ctx.call child: its turns are kept but never sent to a model again
    parent: RunState | None = None


@dataclass
class RunState:
    """A run's fixed `ctx`, and the small part its stages change as it goes."""

    ctx: RunContext
    input: list[dict[str, Any]]  # validated input messages
    chain: tuple[ConnectorSpec, ...] = ()
    history: list[ChatMessage] = field(default_factory=list[ChatMessage])
    written: list[ChatMessage] = field(default_factory=list[ChatMessage])  # the write-ahead input
    conversation: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])  # for the model
    summary: ChatMessage | None = None  # the chat's summary the conversation starts with, if any (compact.py)
    usage: RunUsage = field(default_factory=RunUsage)  # the root's: every model call of the run tree
    stored: bool = False  # the run record and clean input are in the store (write-ahead done)
    begun: bool = False  # its task has started (a cancel before that is only noted)
    cancel_requested: bool = False
    appended: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])  # folded into the next call
    turns: int = 0  # model calls made
    next: Any = None  # a Next hook's `data`, for `stream_end.next`
    output: Any = None  # the final answer's JSON value, once valid against the output schema (`stream_end.output`)
    output_retries: int = 0  # answers sent back for not fitting the output schema (transition `output_retry`)
    metadata: dict[str, Any] = field(default_factory=dict[str, Any])
    locale: str = "en"
    options: RunOptions = field(default_factory=RunOptions)  # what the request and Create set (pipeline/options.py)
    tools: Offer | None = None  # the tools offered this run (and the servers that could not be had), on first use
    signatures: list[str] = field(default_factory=list[str])  # one per tool step, for loop detection
    tool_turns: int = 0  # model turns that answered tool results (the tool loop's count)
    tool_attempt: int = 0  # executions of the current tool round that failed and went back to the model
    children: ChildRuns = field(default_factory=_NoChildren)
    spend: RunSpend = field(default_factory=RunSpend)  # the root's: what its hooks used of the per-run limits
    waiting: list[Approval] = field(default_factory=list[Approval])  # the root's: calls it stopped for (approvals)
    client_calls: list[ToolCall] = field(default_factory=list[ToolCall])  # the root's: calls the client is to run
    forced: bool = False  # the root's: a model call had the client's tool_choice forcing a call (client_tools.py)
    created: bool = False  # the root's: its Create hook ran (a resume does not ask it again: pipeline/carry.py)
    create_messages: list[dict[str, Any]] | None = None  # the root's: the conversation its Create hook wrote
    searched: bool = False  # the search step has run (or had nothing to do): a resume does not search again
    references: list[ReferenceOut] = field(default_factory=list["ReferenceOut"])  # what searches gave the model
    budgeted: bool = False  # the root's: a budget held it at its start, so each model call is checked (quota.py)
    roles: KnownRoles | None = None  # the root's: its scope's role settings, read with its stage-1 checks
    guardrails: Guardrails | None = None  # app.yml's and its assistant's, once asked for (guard.py)
    # Set once the input guardrails have passed the input or blocked it (or the run ended first): a
    # streamed front door waits for it, so a blocked input is an HTTP error, not a stream (guard.py).
    input_checked: asyncio.Event = field(default_factory=asyncio.Event)
    input_blocked: bool = False
    # The input carries images that no connector of the chain can read: the run fails at stage 4 and the
    # input is stored hidden (shown in the chat, never sent to a model), so the chat goes on without it.
    input_unreadable: bool = False

    # The context's fields, read where a stage reads them.
    @property
    def request(self) -> RunRequest:
        return self.ctx.request

    @property
    def identity(self) -> Identity:
        return self.ctx.identity

    @property
    def assistant(self) -> AssistantSpec:
        return self.ctx.assistant

    @property
    def run(self) -> RunRecord:
        return self.ctx.run

    @property
    def out(self) -> EventChannel:
        return self.ctx.out

    @property
    def buffer(self) -> Buffer:
        return self.ctx.buffer

    @property
    def started_mono(self) -> float:
        return self.ctx.started_mono

    @property
    def thread_id(self) -> str | None:
        return self.ctx.thread_id

    @property
    def depth(self) -> int:
        return self.ctx.depth

    @property
    def hidden(self) -> bool:
        return self.ctx.hidden

    @property
    def parent(self) -> RunState | None:
        return self.ctx.parent

    @property
    def root(self) -> RunState:
        state = self
        while state.parent is not None:
            state = state.parent
        return state

    @property
    def run_id(self) -> str:
        return self.run.id

    @property
    def chat_id(self) -> str:
        return self.run.chat_id

    async def emit(self, event: Event) -> None:
        self.ctx.out.send(event)  # (awaited by the stages: a channel that waits could take its place)

    @property
    def new_messages(self) -> list[ChatMessage]:
        """Everything this run added to the chat: its input, then what it produced."""
        return [*self.written, *self.buffer.messages]
