"""`yao-agent runs CHAT_ID [RUN_ID]`: a chat's runs, or one run's steps — why each model call was made,
which connector and model answered, its tokens and how long each step took (CONTRACT §6 run view).

The same view `GET /api/chats/{id}/runs/{run_id}` answers; `--json` prints that object (or, without a
run id, one object per run).
"""

from __future__ import annotations

import argparse
import json
from typing import Any, TextIO

from yao_agent.base.jsonvalue import as_mapping
from yao_agent.cli.chat import escaped, identity_of, open_runs
from yao_agent.cli.common import said
from yao_agent.errors import Exit


async def runs_of_chat(args: argparse.Namespace, out: TextIO) -> int:
    runs = await open_runs(args)
    try:
        who = identity_of(args)
        if args.run_id:
            views = [(await runs.run_view(who, args.chat_id, args.run_id)).to_api()]
        else:  # (NotFound, exit 2, for a chat that is not theirs)
            views = [view.to_api() for view in await runs.conversations.run_views(who, args.chat_id)]
    finally:
        await runs.aclose()
    if args.json:
        for view in views:
            print(json.dumps(view, ensure_ascii=False), file=out)
    else:
        for view in views:
            _show(view, out, steps=bool(args.run_id))
    return Exit.OK


def _show(view: dict[str, Any], out: TextIO, *, steps: bool) -> None:
    usage = as_mapping(view.get("usage"))
    cost = f" · ${usage['cost_usd']:.4f}" if usage.get("cost_usd") else ""
    started = view["started_at"][:19].replace("T", " ")
    said = f"{view['run_id']}  {started}  {view['assistant_id']}  {view['status']} ({view['reason']})"
    print(escaped(f"{said}  {usage.get('total_tokens', 0)} tokens{cost}  {_ms(view.get('duration_ms'))}"), file=out)
    for step in view["steps"] if steps else ():
        print(escaped("  " + _step_line(step)), file=out)


def _step_line(step: dict[str, Any]) -> str:
    """`3 llm  tool_results  fake.model/text  120→35 tokens  0.4 s  completed`."""
    parts = [f"{step['seq']:>2} {step['type']:<11}", step.get("transition") or ""]
    if step.get("connector"):
        parts.append(f"{step['connector']}/{step.get('model') or ''}")
    used = as_mapping(step.get("usage"))
    if used:
        parts.append(f"{used.get('input_tokens', 0)}→{used.get('output_tokens', 0)} tokens")
    parts += [_ms(step.get("duration_ms")), step["status"]]
    if step.get("error"):  # led by the file:line it names, if any (a hook's throw)
        parts.append(said(step["error"]) or str(step["error"]))
    return "  ".join(p for p in parts if p)


def _ms(duration: int | None) -> str:
    return "" if duration is None else f"{duration / 1000:.1f} s"


__all__ = ["runs_of_chat"]
