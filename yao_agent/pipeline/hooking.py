"""Calling an assistant's JS hook from a stage: recorded as a step, checked, and its policy applied.

`on_error: fail` (the default) ends the run with `hook_error`, naming the hook's file and line;
`on_error: ignore` logs the failure (its message escaped: the hook wrote it) and goes on as if the hook
had returned null. Either way the failure is never silent: it is logged and recorded in the step. A
step records what the hook was given and what it returned (up to `MAX_RECORDED` characters of JSON
each)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeVar

from yao_agent.errors import HookError
from yao_agent.hooks.host import printable
from yao_agent.pipeline import journal
from yao_agent.pipeline.hostapi import hook_context
from yao_agent.pipeline.runtime import Runtime
from yao_agent.pipeline.state import RunState
from yao_agent.store.step_inputs import HookCall, StepInput, Truncated

log = logging.getLogger("yao_agent.hook")
T = TypeVar("T")
MAX_RECORDED = 64 * 1024  # characters of JSON a completed hook step keeps of its input, and of its output
_to_json = json.JSONEncoder(separators=(",", ":")).encode


async def call_hook(
    rt: Runtime,
    state: RunState,
    step_type: Literal["hook_create", "hook_next"],
    function: str,
    args: Sequence[Any],
    parse: Callable[[Any], T | None],
) -> tuple[bool, T | None]:
    """(whether `function` ran, its answer as `parse` types it from the returned JSON value). It did not
    run when the assistant has no hook or its file has no such function; a failure under
    `on_error: ignore` counts as null."""
    spec = state.assistant
    if spec.hook_path is None:
        return False, None
    step = state.buffer.begin(step_type, HookCall(function, list(args)), state.thread_id)
    try:
        # The text this app version loaded (a run keeps its version's hook code); an app not made by the
        # loader names only the path, read as it is now.
        hook = spec.hook_source or spec.hook_path
        outcome = await rt.hooks.call(hook, spec.hook or "", function, args, hook_context(rt, state), spec.hook_policy)
        if not outcome.defined:
            state.buffer.drop(step)
            return False, None
        value = parse(outcome.value)  # the step records what the hook returned, before it is parsed
    except HookError as exc:
        state.buffer.end(step, "failed", error=exc.detail())
        if spec.hook_policy.on_error == "ignore":
            state.buffer.recovered(step)
            log.warning("%s:%s %s failed and is ignored (on_error: ignore): %s", exc.file, exc.line or "?", function,
                        printable(exc.message))  # fmt: skip
            return True, None
        raise
    step.input = _recorded(step.input)
    state.buffer.end(step, "completed", output=_bounded(outcome.value), keep_input=True)
    await journal.commit(rt, state, steps=[step])
    return True, value


def _bounded(value: Any) -> Any:
    """What a completed hook step records of its answer: it, or only its size when it is too large to keep."""
    size = _size(value)
    if size is None or size > MAX_RECORDED:
        return Truncated(size).to_json()
    return value


def _recorded(given: StepInput | None) -> StepInput | None:
    """What a completed hook step records of its input: it, or only its size when it is too large to keep."""
    if not isinstance(given, HookCall):
        return given
    size = _size(given.to_json())
    return given if size is not None and size <= MAX_RECORDED else Truncated(size)


def _size(value: Any) -> int | None:
    """Characters of the value's JSON; None when it has none."""
    try:
        return len(_to_json(value))
    except (TypeError, ValueError):
        return None
