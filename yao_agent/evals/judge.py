"""The judge of `judge` expectations: one model call through `judge_with` (a connector or `use::role`,
resolved for the caller as a run's connector is), asked for a JSON verdict it must give with its reason.

Its answer is read leniently (a fence, words around the JSON) but never guessed: an answer without a
`pass` boolean fails the expectation and says what the judge wrote.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from yao_agent.base.jsonvalue import object_in
from yao_agent.connectors import FailedTry, Fallback, ModelRequest, stream_call
from yao_agent.connectors.assemble import Assembled
from yao_agent.connectors.request import CallOptions
from yao_agent.connectors.resolve import resolve_connectors
from yao_agent.evals.expect import Judge, Verdict
from yao_agent.evals.replay import Compare, Preference
from yao_agent.identity import Identity
from yao_agent.metering.usage import call_usage
from yao_agent.pipeline.runtime import Runtime

PROMPT = (
    "You grade an assistant's answer against a rubric. Reply with one JSON object and nothing else: "
    '{"pass": true or false, "reason": "<one sentence>"}. Pass only if the answer meets the whole rubric.'
)
PAIRWISE = (
    "You compare two answers an assistant gave to the same conversation. Reply with one JSON object and nothing "
    'else: {"better": "A" or "B" or "same", "reason": "<one sentence>"}. Say "same" when neither is better.'
)


def judge_for(rt: Runtime, ref: str, identity: Identity) -> Judge:
    """A judge calling through `ref` as `identity` (whose role settings pick the connector)."""

    async def grade(rubric: str, question: str, answer: str) -> Verdict:
        asked = f"Rubric: {rubric}\n\nThe user asked:\n{question}\n\nThe assistant answered:\n{answer}"
        try:
            text, cost = await ask(rt, ref, identity, PROMPT, asked)
        except Exception as exc:
            return Verdict(False, f"the judge failed: {exc}")
        return read_verdict(text, cost)

    return grade


def pairwise_for(rt: Runtime, ref: str, identity: Identity, rng: random.Random) -> Compare:
    """A judge of which of two answers is better, through `ref`. The new answer is shown first or second at
    random (`rng`), so a judge that leans to the first answer it reads favours neither side."""

    async def compare(question: str, old: str, new: str) -> Preference:
        new_first = rng.random() < 0.5
        first, second = (new, old) if new_first else (old, new)
        asked = f"The user asked:\n{question}\n\nAnswer A:\n{first}\n\nAnswer B:\n{second}"
        try:
            text, cost = await ask(rt, ref, identity, PAIRWISE, asked)
        except Exception as exc:
            return Preference(None, f"the judge failed: {exc}")
        said = answer_object(text)
        better = said.get("better")
        if better not in ("A", "B", "same"):
            return Preference(None, f"the judge gave no verdict: {quoted(text)}", cost)
        reason = str(said.get("reason") or "")
        if better == "same":
            return Preference("same", reason, cost)
        return Preference("new" if (better == "A") == new_first else "old", reason, cost)

    return compare


async def ask(rt: Runtime, ref: str, identity: Identity, system: str, asked: str) -> tuple[str, float | None]:
    """One call of the judge through `ref` (its fallbacks too): what it wrote, and what it cost."""
    found = await resolve_connectors(ref, rt.app, identity, rt.store, rt.environ)
    request = ModelRequest(messages=[{"role": "system", "content": system}, {"role": "user", "content": asked}],
                           options=CallOptions(temperature=0))  # fmt: skip
    got, answering = Assembled(), found.connectors[0] if found.connectors else None
    async for event in stream_call(found.connectors, request, engines=rt.engines, policy=rt.retry, sleep=rt.sleep,
                                   environ=rt.environ, cooldowns=rt.cooldowns):  # fmt: skip
        if isinstance(event, Fallback):
            answering = next((c for c in found.connectors if c.id == event.to_connector), answering)
        elif not isinstance(event, FailedTry):
            got.add(event)
    used = call_usage(got.usage, answering)
    return "".join(got.text), used.get("cost_usd") if used else None


def read_verdict(text: str, cost: float | None) -> Verdict:
    """The judge's answer as a verdict: its `pass` and `reason`, or a failure quoting what it wrote."""
    said = answer_object(text)
    passed = said.get("pass")
    if not isinstance(passed, bool):
        return Verdict(False, f"the judge gave no verdict: {quoted(text)}", cost)
    return Verdict(passed, str(said.get("reason") or ""), cost, {"judge": dict(said)})


def answer_object(text: str) -> Mapping[str, Any]:
    """The JSON object a judge wrote, read leniently (a fence, words around it); empty when there is none."""
    return object_in(text)


def quoted(text: str) -> str:
    return repr(" ".join(text.split())[:80])
