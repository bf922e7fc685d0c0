"""Tools the client brings (CONTRACT §9.2): offered beside the assistant's, run by the client.

A request's `tools` (OpenAI function tools) are offered to the root run's model calls with the
assistant's own; a name both have is refused before the run starts (`check_names`). When a reply calls
a client tool, the reply's server-side calls run first, then the run stops `waiting`, reason
`client_tools`: its client calls are recorded as a `waiting` tool step (what the continuation answers)
and get stand-in results at close, so the stored chat stays valid to send. The client's next request on
the chat brings their results (`RunRequest.client_results`): the run continues as a resume of the one
that waited — its budgets, turn counts and journal carry over — each result taking its stand-in's
place; user messages sent after those results (an Anthropic client's words in the turn of its
results) are stored after them and read by the model after them. A new user message instead closes the
calls: their stand-ins say why no result came (store/approvals.py `close_client_calls`). The run's end
names the calls it waits for (`shown`). A reply that also calls a tool needing a person's approval waits
for the person first (none of its calls runs); the decision's continuation runs the decided calls, then
waits for the client (`after_approvals`).

`tool_choice`: `none` holds for every model call of the run; `required` or a named function for its
first model call only (the server's own tool loop answers freely after it, or it would never end).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from yao_agent.base.jsonvalue import as_list, as_mapping
from yao_agent.connectors.request import CallOptions
from yao_agent.errors import UsageError
from yao_agent.messages import ToolCall, parse_input
from yao_agent.pipeline import search
from yao_agent.pipeline.approvals import shown_arguments
from yao_agent.pipeline.options import RunOptions
from yao_agent.pipeline.outcomes import Wait
from yao_agent.pipeline.runtime import Runtime
from yao_agent.pipeline.state import RunRequest, RunState
from yao_agent.store.records import ResumePoint, StepRecord
from yao_agent.store.step_inputs import ToolRound
from yao_agent.tools import ToolSpec

if TYPE_CHECKING:
    from yao_agent.shapes import ClientWaitOut

STAND_IN = "waiting: the client runs this tool and sends its result"
REASON = "client_tools"


def options(request: RunRequest) -> RunOptions:
    """The run's options for the client's tools and tool_choice (none when it brought neither)."""
    tools = tuple(dict(t) for t in request.client_tools)
    choice = request.tool_choice if request.tool_choice != "auto" else None
    return RunOptions(client_tools=tools or None, tool_choice=choice)


def definitions(state: RunState) -> list[dict[str, Any]]:
    """The client's tools as a model call offers them (the root run only: a child's tools are its own)."""
    if state.parent is not None:
        return []
    return [dict(t) for t in state.options.client_tools or ()]


def names(state: RunState) -> frozenset[str]:
    return frozenset(str(as_mapping(t.get("function")).get("name")) for t in definitions(state))


def check_names(state: RunState, offered: Sequence[ToolSpec]) -> None:
    """A client tool named like one of the assistant's, or a tool_choice naming no tool offered, is the
    caller's mistake (UsageError, a 400 before the run starts)."""
    theirs = names(state)
    clash = sorted(theirs & {t.name for t in offered})
    if clash:
        raise UsageError(f"tools: '{clash[0]}' is also the name of one of the assistant's own tools; "
                         "give the client's tool another name")  # fmt: skip
    chosen = chosen_function(state.options.tool_choice)
    if chosen is not None and chosen not in theirs | {t.name for t in offered}:
        raise UsageError(f"tool_choice: no tool named '{chosen}' is offered")


async def check_offer(rt: Runtime, state: RunState) -> None:
    """`check_names` against the assistant's own tools, before the run starts (its servers start now, as
    the run would start them)."""
    if state.options.client_tools is None and chosen_function(state.options.tool_choice) is None:
        return
    uses = state.assistant.mcp.servers
    offered = (await rt.tools.offer(uses)).tools if uses else []
    check_names(state, [*offered, *([search.TOOL] if search.offers_tool(state) else [])])


def chosen_function(choice: object) -> str | None:
    """The name a `{"type": "function", "function": {"name"}}` tool_choice forces, else None."""
    name = as_mapping(as_mapping(choice).get("function")).get("name")
    return name if isinstance(name, str) else None


def call_option(state: RunState, tools: Sequence[Mapping[str, Any]]) -> CallOptions:
    """The tool_choice of this model call (see the module's doc); none when no tool is offered to it."""
    choice = state.options.tool_choice if state.parent is None else None
    if choice is None or not tools:
        return CallOptions()
    if choice != "none":
        if state.forced:
            return CallOptions()
        state.forced = True
    return CallOptions(tool_choice=choice)


def split(state: RunState, calls: Sequence[ToolCall]) -> tuple[list[ToolCall], list[ToolCall]]:
    """A reply's calls: those the server runs, and those of the client's tools."""
    theirs = names(state)
    return [c for c in calls if c.name not in theirs], [c for c in calls if c.name in theirs]


def unanswered(state: RunState, calls: Sequence[ToolCall]) -> list[ToolCall]:
    """The client's calls among `calls` that this request brings no result for."""
    theirs = names(state)
    given = state.root.request.client_results
    return [c for c in calls if c.name in theirs and c.id not in given]


def brought(state: RunState, results: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a round's results include the client's (a continuation's)."""
    if state.parent is not None:
        return False
    given = state.root.request.client_results
    return any(r.get("tool_call_id") in given for r in results)


def result_of(state: RunState, call_id: str) -> str | None:
    """The client's result for a call, when this request brought one."""
    return state.root.request.client_results.get(call_id) if state.parent is None else None


async def wait(state: RunState, calls: Sequence[ToolCall], attempt: int) -> Wait:
    """Stop the run for the client to run `calls`: the round is kept for the continuation."""
    step = state.buffer.begin("tool", ToolRound(tuple(calls), attempt), state.thread_id)
    state.buffer.end(step, "waiting", output={REASON: [c.id for c in calls]})
    state.root.client_calls.extend(calls)
    return Wait((), client=tuple(calls))


def after_approvals(state: RunState) -> list[ToolCall]:
    """The client's calls of a reply that waits for a person: none runs before the person decides, then
    the run waits for the client to run these (their calls go on as the decision's continuation)."""
    if state.run.status != "waiting" or state.run.reason == REASON:
        return []
    theirs = names(state)
    rounds = [s.input for s in state.buffer.steps
              if s.status == "waiting" and s.thread_id is None and isinstance(s.input, ToolRound)]  # fmt: skip
    return [c for r in rounds for c in r.calls if c.name in theirs]


def shown(state: RunState) -> list[ClientWaitOut]:
    """The calls the run waits for the client to run, as its end names them (`stream_end.client_calls`)."""
    return [{"tool_call_id": c.id, "name": c.name, "arguments": shown_arguments(c)} for c in state.root.client_calls]


async def continuation(rt: Runtime, request: RunRequest) -> RunRequest:
    """The request as it reaches the pipeline: when it answers the calls its chat's run waits for (its
    messages end with their `tool` results), a continuation of that run with those results (what it
    resends of the conversation is stored already); any other request as it is. A request naming no chat
    continues the caller's chat whose run waits for exactly those calls, if there is one."""
    given = results(request.messages)
    if request.resume is not None or request.identity is None or not given:
        return request
    parse_input(request.messages)  # the whole request is well formed, as any run's input is
    chat_id = request.chat_id or await rt.store.waiting_for_client(request.identity, given.keys())
    if chat_id is None:
        return request
    point = await rt.store.resume_point(request.identity, chat_id)  # (an id of the caller's shape)
    pending = pending_calls(point)
    if point is None or not pending or not given.keys() & {c.id for c in pending}:
        return request  # (a new conversation, or results of calls this chat never made: sent whole)
    missing = [c.id for c in pending if c.id not in given]
    if missing:
        raise UsageError(f"messages: the chat waits for the result of every call it made; missing: "
                         f"{', '.join(missing)} (a `tool` message each, after the assistant message)")  # fmt: skip
    return replace(request, chat_id=chat_id, messages=after_results(request.messages), resume=point,
                   client_results={c.id: given[c.id] for c in pending})  # fmt: skip


def pending_calls(point: ResumePoint | None) -> list[ToolCall]:
    """The calls a chat's run waits for the client to run (none unless it waits for them)."""
    if point is None or point.run.status != "waiting" or point.run.reason != REASON:
        return []
    return waiting_calls(point.steps)


def waiting_calls(steps: Sequence[StepRecord]) -> list[ToolCall]:
    """The calls of the client's tools a run's steps stopped for (its `waiting` tool rounds)."""
    rounds = [s.input for s in steps if s.status == "waiting" and isinstance(s.input, ToolRound)]
    return [c for r in rounds for c in r.calls]


def results(messages: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """The tool results that end a request's messages (after its last assistant message; user messages
    may follow them, `after_results`), by call id."""
    out: dict[str, str] = {}
    for message in reversed(messages[: len(messages) - len(after_results(messages))]):
        if message.get("role") != "tool":
            break
        out.setdefault(str(message.get("tool_call_id")), _text(message.get("content")))
    return out


def after_results(messages: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The user messages after the tool results that end a request (an Anthropic client sends words beside
    its results in one turn): a continuation stores them and the model reads them after those results."""
    held = 0
    while held < len(messages) and messages[len(messages) - 1 - held].get("role") == "user":
        held += 1
    before = messages[len(messages) - 1 - held] if held < len(messages) else None
    after_tools = held > 0 and before is not None and before.get("role") == "tool"
    return list(messages[len(messages) - held :]) if after_tools else []


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    return "".join(str(as_mapping(p).get("text", "")) for p in as_list(content))
