"""Guardrails in a run (CONTRACT §9.5): app.yml's checks and the assistant's, at four stages.

- `input`: the caller's messages, first thing in the run — before the model, a hook, the store or the
  history's write-ahead sees them. A block ends the run `guardrail`, its input stored as a placeholder.
- `output`: the answer on the stream (`OutputGuard`, guardrails/stream.py's hold-back), and as stored.
- `tool_input`: a call's arguments before the tool gets them; `tool_output`: its result before the
  model, the store or the client sees it.

Every hit is a `guardrail` event, a stored `guardrail` step and a count of `yao_guardrail_hits_total`.
A check that fails — a classifier that errs or is late, a hook that throws — blocks unless `on_error:
allow` (fail closed). A block raises `GuardrailBlocked`; messages name the check and where it is
written, never the text it matched.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from yao_agent.base.jsonvalue import as_mapping, object_in
from yao_agent.connectors import ModelRequest
from yao_agent.connectors.request import CallOptions
from yao_agent.connectors.resolve import resolve_connectors
from yao_agent.dsl.specs import GuardCheck, Guardrails, GuardStage
from yao_agent.errors import GuardrailBlocked, HookError, OverBudget
from yao_agent.events import Guardrail
from yao_agent.guardrails.checks import Hit, scan
from yao_agent.guardrails.stream import STREAMED, HoldBack
from yao_agent.pipeline import aside, connector
from yao_agent.pipeline.hostapi import hook_context
from yao_agent.pipeline.runtime import Runtime
from yao_agent.pipeline.state import RunState
from yao_agent.tools import ToolOutcome

log = logging.getLogger("yao_agent.guardrails")
HOLD_BACK = 64
BLOCKED_INPUT = "[blocked by a guardrail]"  # what the store keeps of an input that was blocked
CLASSIFY = (
    "You decide whether a text may pass. Block it if: {prompt}\n"
    'Reply with one JSON object and nothing else: {{"action": "allow" or "block", "reason": "<one sentence>"}}.'
)


def rules(rt: Runtime, state: RunState) -> Guardrails:
    """The run's guardrails: app.yml's, then its assistant's (worked out once per run)."""
    if state.guardrails is None:
        state.guardrails = state.assistant.guardrails.over(rt.app.config.guardrails)
    return state.guardrails


async def check_input(rt: Runtime, state: RunState) -> None:
    """Stage `input`: each given message's text checked, masked in place; GuardrailBlocked on a block."""
    checks = rules(rt, state).input
    try:
        for message in state.input if checks else ():
            message["content"] = await _content(rt, state, "input", message.get("content"), checks)
    except GuardrailBlocked:
        state.input = [{"role": "user", "content": BLOCKED_INPUT}]  # stored in its place: nothing of it is kept
        state.input_blocked = True
        raise
    finally:
        state.input_checked.set()


async def check_appended(rt: Runtime, state: RunState) -> None:
    """Messages appended to the chat while the run works (`Runs.append`) pass the input checks before they
    join its next model call; a block ends the run, and none of them is kept."""
    checks = rules(rt, state).input
    if not checks or not state.appended:
        return
    try:
        for message in state.appended:
            message["content"] = await _content(rt, state, "input", message.get("content"), checks)
    except GuardrailBlocked:
        state.appended = [{"role": "user", "content": BLOCKED_INPUT}]
        raise


def settle_appended(rt: Runtime, state: RunState) -> None:
    """Messages appended after the run's last model call, stored as it ends without a model seeing them:
    masked by the text-only checks; kept only as a placeholder when a check would block them or needs a
    model or a hook (the run is over: nothing may wait for one)."""
    checks = rules(rt, state).input
    if not checks or not state.appended:
        return
    for message in state.appended:
        content = message.get("content")
        text_only = all(c.kind not in ("classifier", "hook") for c in checks)
        found = scan(content, checks) if isinstance(content, str) and text_only else None
        message["content"] = found.text if found is not None and found.blocked is None else BLOCKED_INPUT


async def screened(state: RunState) -> bool:
    """Whether the input guardrails blocked the run, once they have had their say: a streamed front door
    asks before it answers 200 (at once for a run whose assistant has no input guardrails)."""
    if state.guardrails is None or not state.guardrails.input:
        return False
    await state.input_checked.wait()
    return state.input_blocked


async def _content(rt: Runtime, state: RunState, stage: GuardStage, content: Any, checks: Sequence[GuardCheck]) -> Any:
    if isinstance(content, str):
        return await passed(rt, state, stage, content, checks)
    if isinstance(content, list):
        parts: list[Any] = []
        for part in cast(list[object], content):
            given = as_mapping(part)
            text = given.get("text")
            if given.get("type") == "text" and isinstance(text, str):
                part = {**given, "text": await passed(rt, state, stage, text, checks)}
            parts.append(part)
        return parts
    return content


async def tool_arguments(rt: Runtime, state: RunState, arguments: str) -> str:
    """Stage `tool_input`: the arguments as the tool may get them (a masked value stays inside its JSON
    string); GuardrailBlocked on a block."""
    checks = rules(rt, state).tool_input
    return await passed(rt, state, "tool_input", arguments, checks) if checks else arguments


async def tool_result(rt: Runtime, state: RunState, outcome: ToolOutcome) -> ToolOutcome:
    """Stage `tool_output`: the result — or the tool's error, which may quote as much — as the model, the
    store and the client may see it."""
    checks = rules(rt, state).tool_output
    if not checks:
        return outcome
    if outcome.error is not None:
        said = await passed(rt, state, "tool_output", outcome.error, checks)
        return outcome if said == outcome.error else ToolOutcome(result=None, error=said, retryable=outcome.retryable)
    text = outcome.text()
    checked = await passed(rt, state, "tool_output", text, checks)
    return outcome if checked == text else ToolOutcome(result=checked, error=None, retryable=outcome.retryable)


async def passed(rt: Runtime, state: RunState, stage: GuardStage, text: str, checks: Sequence[GuardCheck]) -> str:
    """`text` through `checks` in their order: masked where one masks; GuardrailBlocked where one blocks."""
    for check in checks:
        if check.kind == "classifier":
            hit = await _classified(rt, state, stage, check, text)
        elif check.kind == "hook":
            hit, text = await _hooked(rt, state, stage, check, text)
        else:
            found = scan(text, [check])
            text, hit = found.text, found.blocked or (found.hits[0] if found.hits else None)
        if hit is not None:
            await record(rt, state, stage, hit)
            if hit.action == "block":
                raise blocked(stage, check, hit)
    return text


def blocked(stage: str, check: GuardCheck, hit: Hit) -> GuardrailBlocked:
    where = f"{check.file}:{check.line}"
    return GuardrailBlocked(f"the {stage.replace('_', ' ')} was blocked by a {check.kind} check ({where}): "
                            f"{hit.reason}", stage=stage, check=check.kind)  # fmt: skip


async def record(rt: Runtime, state: RunState, stage: str, hit: Hit) -> None:
    """A hit, told and kept: the event, a stored step, and (from the step, at the run's end) the metric."""
    step = state.buffer.begin("guardrail", None, state.thread_id)
    said = {"stage": stage, "check": hit.check, "action": hit.action, "reason": hit.reason}
    state.buffer.end(step, "failed" if hit.action == "block" else "completed", output=said)
    await state.emit(Guardrail(state.run_id, stage, hit.check, hit.action, hit.reason))


async def _classified(rt: Runtime, state: RunState, stage: str, check: GuardCheck, text: str) -> Hit | None:
    """The classifier's verdict; its failure (an error, no verdict, too late) as `on_error` says."""
    assert check.classifier is not None
    given = check.classifier
    try:
        found = await resolve_connectors(given.with_, rt.app, state.identity, connector.settings(rt, state), rt.environ)
        asked = [{"role": "system", "content": CLASSIFY.format(prompt=given.prompt)}, {"role": "user", "content": text}]
        request = ModelRequest(messages=asked, options=CallOptions(temperature=0))
        async with asyncio.timeout(given.timeout_s):
            said, _ = await aside.call(rt, state, found.connectors, request, {"guardrail": stage})
    except OverBudget:
        raise
    except TimeoutError:
        return _failed(rt, state, "classifier", f"the classifier gave no verdict within {given.timeout_s:g} s")
    except Exception as exc:
        return _failed(rt, state, "classifier", f"the classifier failed: {exc}")
    verdict = object_in(said)
    action, reason = verdict.get("action"), str(verdict.get("reason") or "")
    if action == "allow":
        return None
    if action == "block":
        return Hit("classifier", "block", reason or "the classifier said block")
    return _failed(rt, state, "classifier", f"the classifier gave no verdict: {' '.join(said.split())[:80]!r}")


async def _hooked(rt: Runtime, state: RunState, stage: str, check: GuardCheck, text: str) -> tuple[Hit | None, str]:
    """The hook's `Guard(ctx, stage, content)`: {action: allow | mask | block, content?, reason?}."""
    assert check.hook_path is not None
    try:
        outcome = await rt.hooks.call(check.hook_path, check.hook or "", "Guard", [stage, text],
                                      hook_context(rt, state), state.assistant.hook_policy)  # fmt: skip
    except HookError as exc:
        return _failed(rt, state, "hook", f"the hook failed: {exc.message}"), text
    said = as_mapping(outcome.value)
    action, reason, content = said.get("action"), str(said.get("reason") or ""), said.get("content")
    if not outcome.defined or action in (None, "allow"):
        return None, text
    if action == "mask" and isinstance(content, str):
        return Hit("hook", "mask", reason or "the hook masked it"), content
    if action == "block":
        return Hit("hook", "block", reason or "the hook said block"), text
    return _failed(rt, state, "hook", "Guard returned no usable verdict (expected {action: allow|mask|block, "
                                      "content?: string, reason?: string})"), text  # fmt: skip


def _failed(rt: Runtime, state: RunState, check: str, why: str) -> Hit | None:
    if rules(rt, state).on_error == "allow":
        log.warning("run %s: a %s check failed and is passed over (on_error: allow): %s", state.run_id, check, why)
        return None
    return Hit(check, "block", f"{why} (on_error: block)")


@dataclass(slots=True)
class OutputGuard:
    """Stage `output` of one reply: its text and its reasoning, each through a hold-back."""

    rt: Runtime
    state: RunState
    checks: Sequence[GuardCheck]
    texts: dict[str, HoldBack]

    @classmethod
    def of(cls, rt: Runtime, state: RunState) -> OutputGuard | None:
        given = rules(rt, state)
        if not given.output:
            return None
        streamed = [c for c in given.output if c.kind in STREAMED]
        whole = any(c.kind not in STREAMED for c in given.output)
        hold = given.hold_back_chars or HOLD_BACK
        texts = {kind: HoldBack(streamed, hold, whole) for kind in ("text", "reasoning")}
        return cls(rt, state, given.output, texts)

    async def feed(self, kind: str, text: str) -> list[tuple[str, str]]:
        """What may be sent now, (kind, text) in order: the answer's first words release the reasoning held
        before them (a model reasons, then answers), so the two never interleave."""
        out: list[tuple[str, str]] = []
        thinking = self.texts["reasoning"]
        if kind == "text" and thinking.pending and not thinking.whole:
            out.append(("reasoning", await self.feed_rest(thinking)))
        try:
            out.append((kind, self.texts[kind].feed(text)))
        except GuardrailBlocked as exc:
            await record(self.rt, self.state, "output", Hit(exc.check, "block", "a match in the answer"))
            raise
        return [(k, t) for k, t in out if t]

    async def finish(self, kind: str, complete: bool) -> str:
        """The rest of one text to send; an answer cut short loses what was held (never sent, never kept)."""
        held = self.texts[kind]
        if not complete:
            if held.whole:
                held.drop()
                return ""
            try:
                return held.finish()
            except GuardrailBlocked:
                return ""
        rest = await self.feed_rest(held)
        if held.whole:
            held.sent = []  # nothing of it is sent before the whole answer has passed
            if kind == "text":
                rest = await passed(
                    self.rt, self.state, "output", rest, [c for c in self.checks if c.kind not in STREAMED]
                )
            held.sent = [rest] if rest else []
        return rest

    async def feed_rest(self, held: HoldBack) -> str:
        try:
            return held.finish()
        except GuardrailBlocked as exc:
            await record(self.rt, self.state, "output", Hit(exc.check, "block", "a match in the answer"))
            raise

    async def report(self) -> None:
        """One hit per check that masked something in this reply."""
        for held in self.texts.values():
            for hit in held.found():
                await record(self.rt, self.state, "output", hit)
            held.hits.clear()

    def shown(self, kind: str) -> str:
        return self.texts[kind].shown
