"""What a run is asked to do (`RunRequest`), and what it knows while it runs (`RunState`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from yao_agent.connectors import Usage
from yao_agent.dsl.specs import AssistantSpec, ConnectorSpec
from yao_agent.errors import RunError
from yao_agent.events import Event
from yao_agent.identity import Identity
from yao_agent.messages import ChatMessage
from yao_agent.pipeline.buffer import Buffer
from yao_agent.pipeline.channel import EventChannel
from yao_agent.store.records import ResumePoint, RunRecord
from yao_agent.tools import Offer
from yao_agent.vocabulary import OnBusy


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
    options: Mapping[str, Any] = field(default_factory=dict[str, Any])  # call options (temperature, ...)


@dataclass
class RunState:
    request: RunRequest
    identity: Identity
    assistant: AssistantSpec
    run: RunRecord
    out: EventChannel
    buffer: Buffer
    started_mono: float
    input: list[dict[str, Any]]  # validated input messages
    chain: tuple[ConnectorSpec, ...] = ()
    history: list[ChatMessage] = field(default_factory=list[ChatMessage])
    written: list[ChatMessage] = field(default_factory=list[ChatMessage])  # the write-ahead input
    conversation: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])  # for the model
    usage: Usage = field(default_factory=Usage)
    stored: bool = False  # the run record and clean input are in the store (write-ahead done)
    begun: bool = False  # its task has started (a cancel before that is only noted)
    cancel_requested: bool = False
    appended: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])  # folded into the next call
    turns: int = 0
    failure: RunError | None = None
    next: Any = None
    metadata: dict[str, Any] = field(default_factory=dict[str, Any])
    locale: str = "en"
    options: dict[str, Any] = field(default_factory=dict[str, Any])  # what the Create hook changed
    thread_id: str | None = None  # a child run's stack id; None for the root
    depth: int = 0  # how deeply delegated (0 = root)
    hidden: bool = False  # a ctx.call child: its turns are kept but never sent to a model again
    parent: RunState | None = None
    tools: Offer | None = None  # the tools offered this run (and the servers that could not be had), on first use
    signatures: list[str] = field(default_factory=list[str])  # one per tool step, for loop detection
    tool_turns: int = 0  # model turns that answered tool results (the tool loop's count)

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
        await self.out.send(event)

    @property
    def new_messages(self) -> list[ChatMessage]:
        """Everything this run added to the chat: its input, then what it produced."""
        return [*self.written, *self.buffer.messages]
