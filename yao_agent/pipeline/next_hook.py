"""Stage 9: after the model (and its tools), who decides what happens next.

A `Next` hook may decide: `{delegate}` hands the conversation to another assistant, `{continue:
{messages}}` runs one more model turn with those messages appended (bounded by `limits.max_turns`),
`{stop: true}` ends the run with what has been said; a `continue` with no messages asks the model again
with the conversation as it is. `{data}` goes to `stream_end.next`. A hook that decides nothing (null,
or only `data`) changes nothing: as without a hook, the tool loop feeds tool results back to the model,
and otherwise the reply stands.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from yao_agent.base.jsonvalue import as_mapping
from yao_agent.errors import HookError, UsageError
from yao_agent.messages import ChatMessage, parse_input
from yao_agent.pipeline.answers import Delegation, NextDecision
from yao_agent.pipeline.hook_create import run_options
from yao_agent.pipeline.hooking import call_hook
from yao_agent.pipeline.runtime import Runtime
from yao_agent.pipeline.state import RunState

ALLOWED = ("data", "delegate", "continue", "stop")  # CONTRACT §3.5: anything else is a hook error
DECISIONS = ("delegate", "continue", "stop")  # at most one: each decides what happens next


def payload(state: RunState, reply: ChatMessage, results: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What Next sees: the conversation before the reply, the reply, and each of its tool calls' outcome.

    `messages` keeps earlier tool rounds whole (a call the model corrected, with its error result);
    the reply's own results are `tools`.
    """
    completion = {
        "message_id": reply.id,
        "content": reply.content,
        "reasoning": reply.reasoning,
        "tool_calls": [c.to_dict() for c in reply.tool_calls],
    }
    return {"messages": _before_reply(state.conversation), "completion": completion, "tools": list(results)}


def _before_reply(conversation: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation without its last reply and the tool results that follow it (only they can)."""
    end = len(conversation)
    while end and conversation[end - 1].get("role") == "tool":
        end -= 1
    if end and conversation[end - 1].get("role") == "assistant":
        end -= 1
    return list(conversation[:end])


async def decide(rt: Runtime, state: RunState, given: list[Any]) -> NextDecision | None:
    """Call Next with `given` ([payload, options]); its checked answer (None: no hook, or it said null)."""
    _, decision = await call_hook(rt, state, "hook_next", "Next", given, lambda value: check(state, value))
    return decision


def arguments(state: RunState, reply: ChatMessage, results: Sequence[Mapping[str, Any]]) -> list[Any]:
    return [payload(state, reply, results), run_options(state)]


def check(state: RunState, value: Any) -> NextDecision | None:
    """Next's answer, checked and typed; a HookError for anything it may not return."""
    if value is None:
        return None
    answer = dict(as_mapping(value))
    if not isinstance(value, Mapping):
        raise _bad(state, f"Next returned {type(value).__name__} (expected an object or null)")
    for key in answer:
        if key not in ALLOWED:
            raise _bad(state, f"Next returned unknown key '{key}' (expected one of: {', '.join(ALLOWED)})")
    if answer.get("stop") is not None and not isinstance(answer["stop"], bool):
        raise _bad(state, f"Next returned stop of type {type(answer['stop']).__name__} (expected true or false)")
    chosen = [key for key in DECISIONS if answer.get(key) not in (None, False)]
    if len(chosen) > 1:
        raise _bad(
            state, f"Next returned both {' and '.join(chosen)} (expected at most one of: {', '.join(DECISIONS)})"
        )
    return NextDecision(data=answer.get("data"), stop=bool(answer.get("stop")),
                        delegate=_delegation(state, answer.get("delegate")),
                        continue_with=_continued(state, answer.get("continue")))  # fmt: skip


def _continued(state: RunState, more: Any) -> tuple[dict[str, Any], ...] | None:
    """The messages a `continue` appends. None or none at all (`{continue: {}}`, `{messages: []}`) is
    meaningful: the model is asked again with the conversation as it is (a hook that wants another try,
    or lets a tool's result speak)."""
    if more is None or more is False:
        return None
    if not isinstance(more, Mapping):
        raise _bad(state, f"Next returned continue of type {type(more).__name__} (expected {{messages?: [...]}})")
    given = as_mapping(cast("object", more)).get("messages")
    if given is None or given == []:
        return ()
    try:
        return tuple(parse_input(given, where="Next continue.messages"))
    except UsageError as exc:
        raise _bad(state, str(exc)) from None


def _delegation(state: RunState, given: Any) -> Delegation | None:
    if given is None:
        return None
    target = as_mapping(given)
    if not isinstance(target.get("assistant_id"), str):
        raise _bad(state, "Next returned a delegate without assistant_id (expected {assistant_id, messages?})")
    return Delegation(str(target["assistant_id"]), target.get("messages"))


def _bad(state: RunState, message: str) -> HookError:
    return HookError(message, file=state.assistant.hook or "", function="Next")
