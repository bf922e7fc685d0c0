"""The eval's report: a row per case for people, one JSON object for programs, JUnit XML for CI."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TextIO
from xml.etree import ElementTree

from yao_agent.evals.run import CaseResult


def money(cost: float | None) -> str:
    return "$?" if cost is None else f"${cost:.4f}"


def print_table(results: Sequence[CaseResult], out: TextIO, printable: Callable[[str], str] = str) -> None:
    """`PASS  evals/support.yml:7  refund policy  $0.0012  340 ms`, each failure and judge's reason below."""
    for r in results:
        where = f"{r.file}:{r.line}"
        mark = "PASS" if r.passed else "FAIL"
        print(printable(f"{mark}  {where}  {r.case}  {money(r.cost_usd)}  {r.latency_ms:.0f} ms"), file=out)
        for failure in r.failures:
            attempt = f" (run {failure.attempt})" if len(r.runs) > 1 else ""
            print(printable(f"      ✗ {failure.expectation}{attempt}: {failure.said}"), file=out)
        for verdict in r.judged:
            if verdict.passed and verdict.said:
                print(printable(f"      judge: {verdict.said}"), file=out)
    failed = sum(not r.passed for r in results)
    total = [r.cost_usd for r in results]
    cost = None if any(c is None for c in total) else sum(c for c in total if c is not None)
    print(f"{len(results)} cases: {len(results) - failed} passed, {failed} failed · {money(cost)}", file=out)


def as_json(results: Sequence[CaseResult]) -> dict[str, Any]:
    cases = [
        {"eval": r.eval_id, "file": r.file, "line": r.line, "case": r.case, "passed": r.passed,
         "failures": [{"expectation": f.expectation, "said": f.said, "run": f.attempt} for f in r.failures],
         "judge": [{"passed": v.passed, "reason": v.said} for v in r.judged],
         "runs": [{"run_id": o.run_id, "status": o.status, "cost_usd": o.cost_usd, "latency_ms": o.latency_ms}
                  for o in r.runs],
         "cost_usd": r.cost_usd, "latency_ms": r.latency_ms}
        for r in results
    ]  # fmt: skip
    failed = sum(not r.passed for r in results)
    return {"passed": len(results) - failed, "failed": failed, "cases": cases}


def junit(results: Sequence[CaseResult]) -> bytes:
    """One `<testsuite>` per eval file, one `<testcase>` per case, a `<failure>` naming what failed."""
    suites = ElementTree.Element("testsuites")
    for eval_id in dict.fromkeys(r.eval_id for r in results):
        mine = [r for r in results if r.eval_id == eval_id]
        suite = ElementTree.SubElement(suites, "testsuite", name=eval_id, tests=str(len(mine)),
                                       failures=str(sum(not r.passed for r in mine)))  # fmt: skip
        for r in mine:
            case = ElementTree.SubElement(suite, "testcase", classname=eval_id, name=r.case, file=r.file,
                                          line=str(r.line), time=f"{r.latency_ms / 1000:.3f}")  # fmt: skip
            if not r.passed:
                said = "; ".join(f"{f.expectation}: {f.said}" for f in r.failures)
                failure = ElementTree.SubElement(case, "failure", message=r.failures[0].expectation)
                failure.text = said
    return ElementTree.tostring(suites, encoding="utf-8", xml_declaration=True)
