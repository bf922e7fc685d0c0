"""A replay's report: a row per stored turn for people (`REGRESSED  run_…  $old → $new  old → new ms`), one
JSON object for programs, and an HTML page that shows each old and new answer side by side."""

from __future__ import annotations

import html
import statistics
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from yao_agent.evals.replay import OUTCOMES, Replayed
from yao_agent.evals.report import money

FAILING = ("regressed", "failed")  # what makes `eval replay` exit 1


def print_replay(results: Sequence[Replayed], out: TextIO, printable: Callable[[str], str] = str) -> None:
    for r in results:
        head = f"{r.outcome.upper():<12}  {r.run_id}  {r.assistant_id}  {_who(r)}  {_cost_change(r)}  {_time_change(r)}"
        print(printable(head), file=out)
        print(printable(f"      asked: {_short(r.question)}"), file=out)
        if r.outcome in ("changed", "improved", "regressed"):
            print(printable(f"      was: {_short(r.old_answer)}"), file=out)
            print(printable(f"      now: {_short(r.new.answer if r.new else '')}"), file=out)
        if r.why:
            label = "judge" if r.outcome in ("improved", "regressed", "changed") else "why"
            print(printable(f"      {label}: {r.why}"), file=out)
    print(summary(results), file=out)


def summary(results: Sequence[Replayed]) -> str:
    counts = ", ".join(f"{n} {outcome}" for outcome, n in counted(results).items())
    old, new = totals(results)
    p50 = _p50([r.old_latency_ms for r in results]), _p50([r.new.latency_ms if r.new else None for r in results])
    return (f"{len(results)} runs: {counts} · cost {money(old)} → {money(new)} · latency p50 "
            f"{_ms(p50[0])} → {_ms(p50[1])}")  # fmt: skip


def counted(results: Sequence[Replayed]) -> dict[str, int]:
    return {outcome: sum(r.outcome == outcome for r in results) for outcome in OUTCOMES}


def totals(results: Sequence[Replayed]) -> tuple[float | None, float | None]:
    """What the stored runs cost, and what their replays cost (the judge's calls included); None when a
    price is unknown."""
    old = [r.old_cost_usd for r in results]
    new = [r.new.cost_usd if r.new else 0.0 for r in results] + [r.judge_cost_usd for r in results if r.judged]
    return _sum(old), _sum(new)


def replay_json(results: Sequence[Replayed]) -> dict[str, Any]:
    old, new = totals(results)
    runs = [
        {"run_id": r.run_id, "chat_id": r.chat_id, "assistant": r.assistant_id, "user": r.user_id, "team": r.team_id,
         "outcome": r.outcome, "why": r.why, "question": r.question,
         "old": {"answer": r.old_answer, "tool_calls": list(r.old_calls), "cost_usd": r.old_cost_usd,
                 "latency_ms": r.old_latency_ms},
         "new": None if r.new is None else {"run_id": r.new.run_id, "status": r.new.status, "answer": r.new.answer,
                                            "tool_calls": r.new_calls, "cost_usd": r.new.cost_usd,
                                            "latency_ms": r.new.latency_ms},
         "judge_cost_usd": r.judge_cost_usd}
        for r in results
    ]  # fmt: skip
    return {"counts": counted(results), "cost_usd": {"old": old, "new": new}, "runs": runs}


def replay_html(results: Sequence[Replayed]) -> str:
    """A page a person reads: the summary, then each turn with its old and new answers side by side."""
    rows = "\n".join(_html_turn(r) for r in results)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>yao-agent replay</title>
<style>
body{{font:15px/1.45 system-ui,sans-serif;margin:2rem auto;max-width:72rem;padding:0 1rem;color:#1f2328}}
section{{border:1px solid #d0d7de;border-radius:8px;margin:1rem 0;padding:.75rem 1rem}}
.pair{{display:grid;grid-template-columns:1fr 1fr;gap:1rem}} pre{{white-space:pre-wrap;margin:.25rem 0}}
.tag{{font-weight:600;padding:.1rem .45rem;border-radius:4px}} .regressed,.failed{{background:#ffebe9}}
.improved{{background:#dafbe1}} .changed,.unreplayable{{background:#fff8c5}} .unchanged{{background:#f6f8fa}}
small{{color:#59636e}}
</style></head><body>
<h1>Replay</h1><p>{html.escape(summary(results))}</p>
{rows}
</body></html>
"""


def _html_turn(r: Replayed) -> str:
    e = html.escape
    new = r.new.answer if r.new else ""
    why = f"<p><small>{e(r.why)}</small></p>" if r.why else ""
    return (f'<section><p><span class="tag {r.outcome}">{r.outcome}</span> <code>{e(r.run_id)}</code> '
            f"{e(r.assistant_id)} · {e(_who(r))} · {e(_cost_change(r))} · {e(_time_change(r))}</p>"
            f"<p><b>Asked:</b> {e(r.question)}</p>{why}"
            f'<div class="pair"><div><b>Before</b><pre>{e(r.old_answer)}</pre>'
            f"<small>{e(', '.join(r.old_calls) or 'no tool calls')}</small></div>"
            f"<div><b>After</b><pre>{e(new)}</pre><small>{e(', '.join(r.new_calls) or 'no tool calls')}</small>"
            "</div></div></section>")  # fmt: skip


def _who(r: Replayed) -> str:
    return f"{r.user_id}@{r.team_id}" if r.team_id else r.user_id


def _cost_change(r: Replayed) -> str:
    new = r.new.cost_usd if r.new else None
    return f"{money(r.old_cost_usd)} → {money(new)}"


def _time_change(r: Replayed) -> str:
    return f"{_ms(r.old_latency_ms)} → {_ms(r.new.latency_ms if r.new else None)}"


def _ms(value: float | None) -> str:
    return "?" if value is None else f"{value:.0f} ms"


def _p50(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _sum(values: Sequence[float | None]) -> float | None:
    return None if any(v is None for v in values) else round(sum(v for v in values if v is not None), 8)


def _short(text: str, limit: int = 160) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
