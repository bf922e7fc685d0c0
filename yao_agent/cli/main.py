"""The `yao-agent` command: parse arguments, call the library, render the result. Each family of
commands lives in its own module (app, chats, roles, tokens, usage, kb, audit, serve) and adds itself to the
parser here.

Exit codes (`errors.Exit`): 0 ok, 1 the run failed, 2 usage or validation error. No traceback ever
reaches the user unless YAO_AGENT_DEBUG=1 asks for one.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from typing import TextIO

from yao_agent import settings
from yao_agent.cli import app, audit, chats, evals, hooks, kb, roles, serve, tokens, usage
from yao_agent.cli.common import Commands, global_options, said
from yao_agent.errors import EnvVarMissing, Exit, HookError, RunError, SpecError, UsageError, YaoAgentError

# The order `--help` lists them in.
FAMILIES = (app, chats, roles, tokens, usage, kb, evals, hooks, audit, serve)


class Parser(argparse.ArgumentParser):
    """The `yao-agent` parser: it reads `eval replay` as the command it is (`evals.spelled`)."""

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        given = evals.spelled(sys.argv[1:] if args is None else args)
        return super().parse_known_args(given, namespace or argparse.Namespace())


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="yao-agent", description="Run YAML assistants through one pipeline.")
    global_options(parser, suppress=False)
    cmds = Commands(parser, "command", "COMMAND")
    for family in FAMILIES:
        family.add_commands(cmds)
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    started = time.monotonic()  # `chat` and `resume` say how long the user waited since then
    stream = out or sys.stdout
    parser = build_parser()
    args = parser.parse_args(argv)
    args.started = started
    try:
        return int(args.func(args, stream))
    except SpecError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        return Exit.USAGE
    except (UsageError, EnvVarMissing) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return Exit.FAILED if isinstance(exc, EnvVarMissing) else Exit.USAGE
    except RunError as exc:
        print(f"failed ({exc.reason}): {said(exc.detail()) if isinstance(exc, HookError) else exc}", file=sys.stderr)
        return Exit.FAILED
    except YaoAgentError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return Exit.FAILED
    except KeyboardInterrupt:
        return Exit.INTERRUPTED
    except BrokenPipeError:  # the reader left (`| head`): nothing more to say, and nowhere to say it
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115  (the interpreter flushes it at exit)
        return Exit.FAILED
    except Exception as exc:  # the last line of defence: never a traceback unless asked for
        if settings.debug():
            raise
        print(
            f"internal error: {type(exc).__name__}: {exc} (set YAO_AGENT_DEBUG=1 for details)",
            file=sys.stderr,
        )
        return Exit.FAILED
