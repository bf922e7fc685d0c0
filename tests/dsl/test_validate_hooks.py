"""`yao-agent validate` loads every hook file in V8 and reports what a run would meet, located."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

from tests.support.apps import make_app
from yao_agent.cli import main

HOOKED = "name: {name}\nhook: hooks/{name}.js\n"
MODULE_HINT = (
    " (a hook file is a plain script, not a module: define Create and Next as top-level functions, "
    "without export or import)"
)


def hooked(root: Path, hooks: dict[str, str], more: dict[str, str | bytes | None] | None = None) -> Path:
    """An app with one assistant per hook file, each named after its file."""
    files: dict[str, str | bytes | None] = {}
    for name, source in hooks.items():
        files[f"assistants/{name}/assistant.yml"] = HOOKED.format(name=name)
        files[f"hooks/{name}.js"] = source
    return make_app(root, {**files, **(more or {})})


def validate(app: Path, *extra: str) -> tuple[int, list[str]]:
    out = io.StringIO()
    code = main(["validate", "--app", str(app), *extra], out=out)
    return code, out.getvalue().splitlines()


def test_a_syntax_error_is_reported_at_its_line_and_the_fixed_hook_passes(tmp_path: Path) -> None:
    app = hooked(tmp_path, {"bad": "function Create(ctx) {\n  return null;\n}}\n"})
    assert validate(app) == (2, ["hooks/bad.js:3: SyntaxError: Unexpected token '}'", "1 error"])
    fixed = (
        '"use strict";\nconst LIMIT = 80;\n'
        "async function Create(ctx, messages) {\n  const last = messages.at(-1)?.content ?? '';\n"
        "  return last.length > LIMIT ? {connector: 'use::heavy'} : null;\n}\n"
        "const Next = (ctx, payload) => ({data: {tools: payload.tools.length}});\n"
    )
    (app / "hooks/bad.js").write_text(fixed)
    assert validate(app) == (0, ["OK: 2 assistants, 1 connector, 0 MCP servers"])


def test_every_broken_hook_is_reported_with_the_other_mistakes(tmp_path: Path) -> None:
    app = hooked(
        tmp_path,
        {
            "bad": "function Create(ctx) {\n  let x = ;\n}\n",
            "cut": "function Next(ctx) {\n  return null;\n",
            "exported": "// a module habit\nexport function Create() { return null; }\n",
            "imported": 'import { helper } from "./lib.js";\nfunction Create() { return null; }\n',
            "throws": "const table = {};\nconfigure(table);\nfunction Create() { return null; }\n",
        },
        {"assistants/chat/assistant.yml": "name: Chat\nconnector: demo.missing\n"},
    )
    code, lines = validate(app)
    assert code == 2
    assert lines == [
        "assistants/chat/assistant.yml:2 connector: unknown connector 'demo.missing' (known: demo.echo)",
        "hooks/bad.js:2: SyntaxError: Unexpected token ';'",
        "hooks/cut.js:2: SyntaxError: Unexpected end of input",
        "hooks/exported.js:2: SyntaxError: Unexpected token 'export'" + MODULE_HINT,
        "hooks/imported.js:1: SyntaxError: Cannot use import statement outside a module" + MODULE_HINT,
        "hooks/throws.js:2: ReferenceError: configure is not defined",
        "6 errors",
    ]


def test_a_hook_is_loaded_even_when_its_assistant_has_other_mistakes(tmp_path: Path) -> None:
    app = hooked(tmp_path, {"bad": "function Create() {\n  return 1 +;\n}\n"})
    (app / "assistants/bad/assistant.yml").write_text("name: Bad\nhook: hooks/bad.js\nhook_policy: {timeout: 5}\n")
    code, lines = validate(app)
    assert code == 2
    assert lines[1:] == ["hooks/bad.js:2: SyntaxError: Unexpected token ';'", "2 errors"]
    assert lines[0].startswith("assistants/bad/assistant.yml:3 hook_policy.timeout: unknown key 'timeout'")


def test_a_file_shared_by_assistants_is_loaded_and_reported_once(tmp_path: Path) -> None:
    app = hooked(tmp_path, {"bad": "function Create() {\n  return )\n}\n"})
    (app / "assistants/twin").mkdir()
    (app / "assistants/twin/assistant.yml").write_text("name: Twin\nhook: ./hooks/../hooks/bad.js\n")
    assert validate(app) == (2, ["hooks/bad.js:2: SyntaxError: Unexpected token ')'", "1 error"])


def test_a_hook_that_defines_nothing_to_call_is_a_warning(tmp_path: Path) -> None:
    app = hooked(tmp_path, {"idle": "// Create comes later\nconst greeting = 'hello';\n"})
    code, lines = validate(app)
    assert code == 0
    assert lines == [
        "warning: hooks/idle.js: defines neither Create nor Next, so the hook does nothing (expected "
        "function Create(ctx, messages, options) or function Next(ctx, payload, options))",
        "OK: 2 assistants, 1 connector, 0 MCP servers",
    ]


def test_a_hook_name_that_is_not_a_function_is_an_error(tmp_path: Path) -> None:
    app = hooked(tmp_path, {"odd": "function Create() { return null; }\nconst Next = {data: 1};\n"})
    assert validate(app) == (2, ["hooks/odd.js: Next is defined but is not a function (it is a object)", "1 error"])


def test_a_top_level_that_never_ends_fails_within_the_assistants_timeout(tmp_path: Path) -> None:
    app = hooked(tmp_path, {"spin": "function Create() { return null; }\nwhile (true) {}\n"})
    policy = "name: Spin\nhook: hooks/spin.js\nhook_policy: {timeout_ms: 50}\n"
    (app / "assistants/spin/assistant.yml").write_text(policy)
    code, lines = validate(app)
    assert code == 2
    assert lines == [
        "hooks/spin.js: hook timed out after 50 ms while loading: its top level did not finish within "
        "hook_policy.timeout_ms, so every run would fail (expected a top level that finishes quickly)",
        "1 error",
    ]


def test_validate_loads_v8_only_for_hooks_and_starts_no_mcp_server_without_the_flag(tmp_path: Path) -> None:
    """Without --mcp a server that would leave a mark when started is never started, nor the MCP SDK imported.
    V8 itself never loads in validate's process: hooks are loaded in a worker process, started only for them."""
    marker = tmp_path / "started"
    server = f"command: python\nargs:\n  - -c\n  - open({str(marker)!r}, 'w').close()\n"
    uses = "name: Tooled\nmcp:\n  servers: [{server: marking, tools: [no_such_tool]}]\n"
    with_hook = hooked(tmp_path / "hooked", {"bad": "function Create() {\n  return\n}}\n"},
                       {"mcps/marking.yml": server, "assistants/tooled/assistant.yml": uses})  # fmt: skip
    without = make_app(tmp_path / "plain", {"mcps/marking.yml": server, "assistants/tooled/assistant.yml": uses})
    code = (
        "import sys; from yao_agent.cli import main; rc = main(['validate', '--app', sys.argv[1]]);"
        "print(sorted(m for m in ('py_mini_racer', 'yao_agent.hooks.procs', 'mcp') if m in sys.modules)); sys.exit(rc)"
    )
    runs = [
        subprocess.run([sys.executable, "-c", code, str(app)], capture_output=True, text=True, timeout=60)
        for app in (with_hook, without)
    ]
    assert (runs[0].returncode, runs[0].stdout.splitlines()) == (
        2,
        ["hooks/bad.js:3: SyntaxError: Unexpected token '}'", "1 error", "['yao_agent.hooks.procs']"],
    )
    assert (runs[1].returncode, runs[1].stdout.splitlines()[-1]) == (0, "[]")
    assert not marker.exists()
