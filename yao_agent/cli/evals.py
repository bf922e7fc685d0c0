"""`yao-agent eval [FILES...]`: run the app's eval cases (evals/*.yml) and say which passed (CONTRACT §9.4).

Exit 0 when every case passed, 1 when one failed; a file that is not valid is refused before anything
runs (exit 2, with its file, line and field, as `validate` says it). Cases run as the user `eval`
(`--user`/`--team` choose another caller), as stored runs tagged with their file and case.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from yao_agent.cli.common import Commands, printable, run_async
from yao_agent.errors import Exit, UsageError

if TYPE_CHECKING:  # (the runner is imported when a command runs: `--help` and `validate` stay light)
    from yao_agent.dsl.specs import EvalSpec
    from yao_agent.evals import CaseResult


def cmd_eval(args: argparse.Namespace, out: TextIO) -> int:
    from yao_agent.evals.report import as_json, junit, print_table

    results = run_async(_run(args))
    if args.json:
        print(json.dumps(as_json(results), ensure_ascii=False), file=out)
    else:
        print_table(results, out, printable)
    if args.junit:  # after the report: a path that cannot be written loses nothing of it
        try:
            Path(args.junit).write_bytes(junit(results))
        except OSError as exc:
            raise UsageError(f"--junit {args.junit}: cannot write it ({exc.strerror or exc})") from None
    return Exit.OK if all(r.passed for r in results) else Exit.FAILED


async def _run(args: argparse.Namespace) -> list[CaseResult]:
    from yao_agent.cli.chat import open_runs
    from yao_agent.evals import run_evals
    from yao_agent.evals.judge import judge_for
    from yao_agent.identity import Identity

    runs = await open_runs(args)
    try:
        chosen = chosen_evals(runs.app.evals, runs.app.root, args.files)
        identity = Identity(args.user or "eval", args.team or None)
        results: list[CaseResult] = []
        for spec in chosen:
            judge = judge_for(runs.rt, spec.judge_with, identity) if spec.judge_with else None
            results += await run_evals(runs.run, spec, identity, judge)
        return results
    finally:
        await runs.aclose()


def chosen_evals(known: Mapping[str, EvalSpec], root: Path, files: list[str]) -> list[EvalSpec]:
    """The evals named (a file's path, or its id), or every one; UsageError naming one that is not there."""
    if not known:
        raise UsageError("the app has no evals (expected YAML files under evals/)")
    if not files:
        return list(known.values())
    by_file = {spec.file: spec for spec in known.values()}
    chosen: list[EvalSpec] = []
    for given in files:
        spec = known.get(given) or by_file.get(_in_app(root, given))
        if spec is None:
            raise UsageError(f"no eval {given!r} in the app (known: {', '.join(sorted(known))})")
        chosen.append(spec)
    return chosen


def _in_app(root: Path, given: str) -> str:
    """A file named on the command line as the app names it (`evals/support.yml`): a path that exists is
    taken from where the command runs, anything else as written."""
    path = Path(given)
    if not path.exists():
        return given
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:  # a file outside the app: no eval of it
        return given


def add_commands(cmds: Commands) -> None:
    about = ("Run the eval cases of the app (every file under evals/, or those named) as stored runs, check "
             "each expectation, print a row per case, and exit 0 when all pass, 1 otherwise.")  # fmt: skip
    p = cmds.command("eval", cmd_eval, "run the app's eval cases (evals/*.yml); exit 1 if one fails", about)
    p.add_argument("files", nargs="*", metavar="FILE", help="eval files (a path, or an id such as support)")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    p.add_argument("--junit", metavar="FILE", help="also write the report as JUnit XML (for CI)")
    p.add_argument("--user", metavar="U", help="the caller the cases run as (default: eval)")
    p.add_argument("--team", metavar="T", help="the caller's team (its role settings pick the connectors)")
