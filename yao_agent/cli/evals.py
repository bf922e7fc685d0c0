"""`yao-agent eval [FILES...]`: run the app's eval cases (evals/*.yml) and say which passed (CONTRACT §9.4).

Exit 0 when every case passed, 1 when one failed; a file that is not valid is refused before anything
runs (exit 2, with its file, line and field, as `validate` says it). Cases run as the user `eval`
(`--user`/`--team` choose another caller), as stored runs tagged with their file and case.

`yao-agent eval replay --against DIR`: the store's latest turns played again on the app in DIR, tools
answered from the stored runs (evals/replay.py); exit 1 when one regressed or failed.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from yao_agent.cli.common import Commands, app_dir, app_of, global_options, open_store, printable, run_async
from yao_agent.errors import Exit, UsageError

if TYPE_CHECKING:  # (the runner is imported when a command runs: `--help` and `validate` stay light)
    from yao_agent.dsl.specs import EvalSpec
    from yao_agent.evals import CaseResult
    from yao_agent.evals.replay import Replayed

REPLAY = "eval-replay"  # `eval replay` as the parser knows it (see `spelled`)
_GLOBAL_WITH_VALUE = ("--app", "--db")


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


def cmd_replay(args: argparse.Namespace, out: TextIO) -> int:
    from yao_agent.evals.replay_report import FAILING, print_replay, replay_html, replay_json

    results = run_async(_replay(args))
    if args.json:
        print(json.dumps(replay_json(results), ensure_ascii=False), file=out)
    else:
        print_replay(results, out, printable)
    if args.html:  # after the report, as --junit
        try:
            Path(args.html).write_text(replay_html(results), encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"--html {args.html}: cannot write it ({exc.strerror or exc})") from None
    return Exit.FAILED if any(r.outcome in FAILING for r in results) else Exit.OK


async def _replay(args: argparse.Namespace) -> list[Replayed]:
    from yao_agent.evals.against import Choice, Plan, replay_stored, since_of

    if args.limit < 1:
        raise UsageError(f"--limit: expected at least 1, got {args.limit}")
    if args.concurrency < 1:
        raise UsageError(f"--concurrency: expected at least 1, got {args.concurrency}")
    since = since_of(args.since, time.time()) if args.since else None
    choice = Choice(args.assistant, args.team, since, args.limit)
    plan = Plan(
        Path(args.against) if args.against else app_dir(args), args.into, args.judge, args.seed, args.concurrency
    )
    source = await open_store(args, app_of(args))
    try:
        return await replay_stored(source, choice, plan)
    finally:
        await source.aclose()


def spelled(argv: Sequence[str]) -> list[str]:
    """The command line with `eval replay` spelled as the parser knows it: `eval` takes files, so its
    replay cannot be a sub-command of its own."""
    given = list(argv)
    index = 0
    while index < len(given) and given[index].startswith("-"):
        index += 2 if given[index] in _GLOBAL_WITH_VALUE else 1
    if given[index : index + 2] == ["eval", "replay"]:
        given[index : index + 2] = [REPLAY]
    return given


def add_commands(cmds: Commands) -> None:
    about = ("Run the eval cases of the app (every file under evals/, or those named) as stored runs, check "
             "each expectation, print a row per case, and exit 0 when all pass, 1 otherwise.")  # fmt: skip
    p = cmds.command(
        "eval",
        cmd_eval,
        "run the app's eval cases (evals/*.yml), or `eval replay` stored turns",
        about + " `yao-agent eval replay --help` says how to replay stored turns on a changed app.",
    )
    p.add_argument("files", nargs="*", metavar="FILE", help="eval files (a path, or an id such as support)")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    p.add_argument("--junit", metavar="FILE", help="also write the report as JUnit XML (for CI)")
    p.add_argument("--user", metavar="U", help="the caller the cases run as (default: eval)")
    p.add_argument("--team", metavar="T", help="the caller's team (its role settings pick the connectors)")
    _add_replay(cmds)


def _add_replay(cmds: Commands) -> None:
    about = ("Replay the store's latest completed turns on the app in --against: each user's message asked "
             "again, as the same user and team, with every tool call answered from the stored run (no MCP "
             "server starts; a call the stored run never made marks the turn unreplayable). Each new answer is "
             "compared with the old one: unchanged, changed, or with --judge improved or regressed. The new "
             "runs go to a scratch store; the deployment's store is only read. Exit 1 when a turn regressed "
             "or its replay failed.")  # fmt: skip
    p = cmds.sub.add_parser(REPLAY, prog="yao-agent eval replay", description=about)  # (listed under `eval`)
    global_options(p, suppress=True)
    p.set_defaults(func=cmd_replay)
    p.add_argument("--against", metavar="DIR", help="the changed app's folder (default: the --app folder)")
    p.add_argument("--assistant", metavar="A", help="only turns of this assistant")
    p.add_argument("--team", metavar="T", help="only turns of this team's members")
    p.add_argument("--since", metavar="WHEN", help="only turns since then: 30m, 24h, 7d, a day or a moment")
    p.add_argument("--limit", type=int, default=50, metavar="N", help="the latest N turns (default: 50)")
    p.add_argument("--judge", metavar="C", help="a connector or use::<role> that says which answer is better")
    p.add_argument("--seed", type=int, metavar="N", help="the seed of the order the judge sees answers in")
    p.add_argument("--concurrency", type=int, default=4, metavar="N", help="turns replayed at once (default: 4)")
    p.add_argument("--into", metavar="URL", help="store the new runs there (default: a scratch SQLite file)")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    p.add_argument("--html", metavar="FILE", help="also write the report as an HTML page")
