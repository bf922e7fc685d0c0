"""The judge of `judge` expectations: one model call through `judge_with` (a connector or `use::role`,
resolved for the caller as a run's connector is), asked for a JSON verdict it must give with its reason.

Its answer is read leniently (a fence, words around the JSON) but never guessed: an answer without a
`pass` boolean fails the expectation and says what the judge wrote.
"""

from __future__ import annotations

import json
import re
from typing import Any

from yao_agent.base.jsonvalue import as_mapping
from yao_agent.connectors import FailedTry, Fallback, ModelRequest, stream_call
from yao_agent.connectors.assemble import Assembled
from yao_agent.connectors.request import CallOptions
from yao_agent.connectors.resolve import resolve_connectors
from yao_agent.evals.expect import Judge, Verdict
from yao_agent.identity import Identity
from yao_agent.metering.usage import call_usage
from yao_agent.pipeline.runtime import Runtime

PROMPT = (
    "You grade an assistant's answer against a rubric. Reply with one JSON object and nothing else: "
    '{"pass": true or false, "reason": "<one sentence>"}. Pass only if the answer meets the whole rubric.'
)
OBJECT = re.compile(r"\{.*\}", re.DOTALL)


def judge_for(rt: Runtime, ref: str, identity: Identity) -> Judge:
    """A judge calling through `ref` as `identity` (whose role settings pick the connector)."""

    async def grade(rubric: str, question: str, answer: str) -> Verdict:
        found = await resolve_connectors(ref, rt.app, identity, rt.store, rt.environ)
        asked = f"Rubric: {rubric}\n\nThe user asked:\n{question}\n\nThe assistant answered:\n{answer}"
        request = ModelRequest(messages=[{"role": "system", "content": PROMPT}, {"role": "user", "content": asked}],
                               options=CallOptions(temperature=0))  # fmt: skip
        got, answering = Assembled(), found.connectors[0] if found.connectors else None
        try:
            async for event in stream_call(found.connectors, request, engines=rt.engines, policy=rt.retry,
                                           sleep=rt.sleep, environ=rt.environ, cooldowns=rt.cooldowns):  # fmt: skip
                if isinstance(event, Fallback):
                    answering = next((c for c in found.connectors if c.id == event.to_connector), answering)
                elif not isinstance(event, FailedTry):
                    got.add(event)
        except Exception as exc:
            return Verdict(False, f"the judge failed: {exc}")
        used = call_usage(got.usage, answering)
        return read_verdict("".join(got.text), used.get("cost_usd") if used else None)

    return grade


def read_verdict(text: str, cost: float | None) -> Verdict:
    """The judge's answer as a verdict: its `pass` and `reason`, or a failure quoting what it wrote."""
    found = OBJECT.search(text)
    value: Any = None
    if found is not None:
        try:
            value = json.loads(found.group(0))
        except json.JSONDecodeError:
            value = None
    said = as_mapping(value)
    passed = said.get("pass")
    if not isinstance(passed, bool):
        return Verdict(False, f"the judge gave no verdict: {' '.join(text.split())[:80]!r}", cost)
    return Verdict(passed, str(said.get("reason") or ""), cost, {"judge": dict(said)})
