"""Running an eval file: each case (times `repeat`) as an ordinary stored run of the assistant, `concurrency`
at once, then every expectation checked against what the run answered.

Eval runs are the caller's runs like any other — stored, metered, in the run view — tagged with
`metadata.eval` (`<file id>/<case name>`); the CLI runs them as the user `eval`, so usage shows them apart.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from yao_agent.base.jsonvalue import as_mapping
from yao_agent.dsl.specs import EvalCase, EvalSpec
from yao_agent.errors import YaoAgentError
from yao_agent.evals.expect import Judge, Observed, ToolCall, Verdict, check, name_of
from yao_agent.identity import Identity
from yao_agent.messages import text_of
from yao_agent.pipeline.handle import RunResult
from yao_agent.pipeline.search import last_user_text
from yao_agent.pipeline.state import RunRequest

Runner = Callable[[RunRequest], Awaitable[RunResult]]  # Runs.run


@dataclass(frozen=True, slots=True)
class Failure:
    expectation: str  # as the report names it: `contains: 30 days`
    said: str
    attempt: int  # which of the `repeat` runs (1-based)


@dataclass(frozen=True, slots=True)
class CaseResult:
    eval_id: str
    file: str
    case: str
    line: int
    passed: bool
    failures: Sequence[Failure]
    runs: Sequence[Observed]
    judged: Sequence[Verdict]  # the judge's verdicts, reasons shown with the row

    @property
    def cost_usd(self) -> float | None:
        """What the case cost: its runs' and its judge's calls (None when a price is unknown)."""
        costs = [o.cost_usd for o in self.runs] + [v.cost_usd for v in self.judged]
        return None if any(c is None for c in costs) else round(sum(c for c in costs if c is not None), 8)

    @property
    def latency_ms(self) -> float:
        return max((o.latency_ms for o in self.runs), default=0.0)


async def run_evals(
    run: Runner, spec: EvalSpec, identity: Identity, judge: Judge | None, clock: Callable[[], float] = time.monotonic
) -> list[CaseResult]:
    """Every case of `spec`, in the file's order."""
    gate = asyncio.Semaphore(spec.concurrency)

    async def one(case: EvalCase) -> CaseResult:
        async with gate:
            return await _case(run, spec, case, identity, judge, clock)

    return list(await asyncio.gather(*(one(case) for case in spec.cases)))


async def _case(
    run: Runner, spec: EvalSpec, case: EvalCase, identity: Identity, judge: Judge | None, clock: Callable[[], float]
) -> CaseResult:
    failures: list[Failure] = []
    observed: list[Observed] = []
    judged: list[Verdict] = []
    question = last_user_text(case.messages)
    for attempt in range(1, spec.repeat + 1):
        request = RunRequest(spec.assistant, identity, list(case.messages), metadata={"eval": f"{spec.id}/{case.name}"})
        started = clock()
        try:
            result = await run(request)
        except YaoAgentError as exc:  # refused before it ran (access, a budget): this case fails, the rest go on
            failures.append(Failure("the run completes", f"it was refused: {exc}", attempt))
            continue
        seen = observe(result, (clock() - started) * 1000)
        observed.append(seen)
        if seen.status != "completed":
            failures.append(Failure("the run completes", f"it ended {seen.status} ({seen.reason})"
                                    + (f": {seen.error}" if seen.error else ""), attempt))  # fmt: skip
            continue
        for expectation in case.expect:
            verdict = await check(expectation, seen, question, judge)
            if "judge" in expectation:
                judged.append(verdict)
            if not verdict.passed:
                failures.append(Failure(name_of(expectation), verdict.said, attempt))
    return CaseResult(spec.id, spec.file, case.name, case.line, not failures, failures, observed, judged)


def observe(result: RunResult, latency_ms: float) -> Observed:
    """What a case's run showed: its last assistant text, every tool call it made, its cost."""
    answers = (text_of(m["content"]) for m in reversed(result.messages) if m["role"] == "assistant")
    answer = next((text for text in answers if text), "")
    calls = [ToolCall(c["name"], _parsed(c["arguments"])) for m in result.messages for c in m.get("tool_calls", [])]
    message = as_mapping(result.error).get("message")
    error = message if isinstance(message, str) else None
    return Observed(result.run_id, result.status, result.reason, answer, calls, result.usage["cost_usd"],
                    round(latency_ms, 1), error)  # fmt: skip


def _parsed(arguments: str) -> Any:
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments
