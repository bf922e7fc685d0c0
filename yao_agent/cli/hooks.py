"""`yao-agent hook types` and `yao-agent hook run`: the hook author's kit (CONTRACT §9.6).

`hook types` prints the TypeScript declarations of `ctx` and of what each hook function is given and may
answer (yao_agent/hooks/api.py), for an editor's completion and checks.

`hook run FILE FUNCTION --input payload.json` calls one function of a `.js` or `.ts` hook once, in the
same V8 workers and limits runs use, with a `ctx` made from the input file instead of a run: no model,
no store. It prints, as one JSON object, what the function returned and everything it did through `ctx`
(log lines, messages sent, memory written, child runs asked for). The input file:

    {"args": [...],                       the function's arguments after ctx (default: [])
     "ctx": {"user_id": "...", ...},      the snapshot's values (defaults below)
     "memory": {"key": value},            what ctx.memory.get finds
     "calls": {"assistant_id": reply},    what ctx.call of each assistant answers
     "search": [references]}              what ctx.search answers
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from yao_agent.base.jsonvalue import as_mapping
from yao_agent.cli.common import Commands, run_async
from yao_agent.errors import Exit, UsageError

if TYPE_CHECKING:
    from yao_agent.hooks.host import HookContext

FUNCTIONS = ("Create", "Next", "Guard")
SNAPSHOT: dict[str, Any] = {"chat_id": "chat_test", "assistant_id": "test", "user_id": "tester", "team_id": None,
                            "locale": "en", "metadata": {}}  # fmt: skip


def cmd_types(args: argparse.Namespace, out: TextIO) -> int:
    from yao_agent.hooks.api import declarations

    print(declarations(), end="", file=out)
    return Exit.OK


def cmd_run(args: argparse.Namespace, out: TextIO) -> int:
    path = Path(args.file)
    if not path.is_file() or path.suffix not in (".js", ".ts"):
        raise UsageError(f"{args.file}: no such .js or .ts file")
    given = _input(args.input)
    did, ctx = _fake_ctx(given)
    value, error = run_async(_call(path, args.function, given.get("args", []), ctx))
    print(json.dumps({"returned": value, **did, **({"error": error} if error else {})}, ensure_ascii=False,
                     indent=2), file=out)  # fmt: skip
    return Exit.FAILED if error else Exit.OK


def _input(name: str | None) -> dict[str, Any]:
    if name is None:
        return {}
    try:
        value = json.loads(Path(name).read_text("utf-8"))
    except OSError as exc:
        raise UsageError(f"--input {name}: cannot be read ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise UsageError(f"--input {name}: not JSON ({exc})") from None
    given = dict(as_mapping(value))
    if not isinstance(value, dict) or not isinstance(given.get("args", []), list):
        raise UsageError(f"--input {name}: expected a JSON object whose `args` is a list")
    return given


def _fake_ctx(given: dict[str, Any]) -> tuple[dict[str, list[Any]], HookContext]:
    """A `ctx` answered from the input file, and what the hook does through it."""
    from yao_agent.hooks.host import HookContext

    did: dict[str, list[Any]] = {"logged": [], "sent": [], "memory_set": [], "called": [], "searched": []}
    memory: dict[str, Any] = dict(as_mapping(given.get("memory")))
    calls: dict[str, Any] = dict(as_mapping(given.get("calls")))

    async def log(level: str, message: str) -> None:
        did["logged"].append({"level": level, "message": message})

    async def send(message: Any) -> str:
        did["sent"].append(message)
        return f"msg_{len(did['sent'])}"

    async def memory_get(key: str) -> Any:
        return memory.get(key)

    async def memory_set(key: str, value: Any) -> None:
        memory[key] = value
        did["memory_set"].append({"key": key, "value": value})

    async def call(assistant_id: str, messages: Any) -> Any:
        did["called"].append({"assistant_id": assistant_id, "messages": messages})
        if assistant_id not in calls:
            raise UsageError(f"the input file has no reply for ctx.call of '{assistant_id}' (add it under `calls`)")
        return calls[assistant_id]

    async def search(query: str, options: Any) -> Any:
        did["searched"].append({"query": query, "options": options})
        return given.get("search") or []

    snapshot: dict[str, Any] = {**SNAPSHOT, **as_mapping(given.get("ctx"))}
    return did, HookContext(snapshot, log, send, memory_get, memory_set, call, hook="hook run", search=search)


async def _call(path: Path, function: str, args: list[Any], ctx: HookContext) -> tuple[Any, str | None]:
    from yao_agent.dsl.specs import HookPolicy
    from yao_agent.errors import HookError
    from yao_agent.hooks import HookRunner

    runner = HookRunner(workers=1)
    try:
        called = await runner.call(path, str(path), function, args, ctx, HookPolicy())
    except HookError as exc:
        return None, f"{exc.file}:{exc.line or '?'}: {exc.message}"
    finally:
        await runner.aclose()
    if not called.defined:
        return None, f"{path} defines no function {function}"
    return called.value, None


def add_commands(cmds: Commands) -> None:
    about = "TypeScript typings of ctx, and one hook function called with a ctx made from a file."
    family = cmds.family("hook", "the hook author's kit: typings, and a hook run once without a model", about)
    family.command("types", cmd_types, "print the TypeScript declarations of ctx and the hook functions",
                   "Print the .d.ts of the hook API: yao-agent hook types > hooks/yao-agent.d.ts")  # fmt: skip
    p = family.command("run", cmd_run, "call one hook function once with a ctx made from a JSON file",
                       "Call FUNCTION of a .js or .ts hook once, in V8 with the runs' limits, its ctx answered "
                       "from --input (args, ctx, memory, calls, search); print what it returned and did. Exit 1 "
                       "if it failed.")  # fmt: skip
    p.add_argument("file", metavar="FILE", help="the hook file (.js or .ts)")
    p.add_argument("function", choices=FUNCTIONS, metavar="FUNCTION", help="Create, Next or Guard")
    p.add_argument("--input", metavar="JSON", help="the call's arguments and ctx answers (see above)")
