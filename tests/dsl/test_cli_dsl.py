"""`yao-agent validate`, `assistants` and `schema` as a user runs them."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.apps import make_app
from yao_agent.cli import main

REPO = Path(__file__).resolve().parents[2]


def run_cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "yao_agent.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )


def test_validate_the_example_app_is_ok_and_never_imports_litellm() -> None:
    code = (
        "import sys; from yao_agent.cli import main; rc = main(['validate', '--app', sys.argv[1]]);"
        "print('LITELLM' if 'litellm' in sys.modules or 'openai' in sys.modules else 'CLEAN'); sys.exit(rc)"
    )
    done = subprocess.run([sys.executable, "-c", code, str(REPO)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == ["OK: 4 assistants, 8 connectors, 1 MCP server, 1 collection", "CLEAN"]


def test_validate_a_broken_reference_exits_2_with_one_located_line(tmp_path: Path) -> None:
    app = make_app(tmp_path, {"assistants/chat/assistant.yml": "name: Chat\nconnector: demo.missing\n"})
    done = run_cli("validate", "--app", str(app))
    assert done.returncode == 2
    lines = done.stdout.splitlines()
    assert lines[0] == (
        "assistants/chat/assistant.yml:2 connector: unknown connector 'demo.missing' (known: demo.echo)"
    )
    assert lines[1:] == ["1 error"]
    assert "Traceback" not in done.stderr


def test_global_options_work_after_the_command_and_from_the_environment(tmp_path: Path) -> None:
    app = make_app(tmp_path, {})
    out = io.StringIO()
    assert main(["validate", "--app", str(app)], out=out) == 0
    os.environ["YAO_AGENT_APP"] = str(app)
    try:
        out = io.StringIO()
        assert main(["validate"], out=out) == 0
        assert out.getvalue().startswith("OK: 1 assistant, 1 connector, 0 MCP servers")
    finally:
        del os.environ["YAO_AGENT_APP"]


def test_validate_prints_warnings_but_passes(tmp_path: Path) -> None:
    app = make_app(tmp_path, {"assistants/chat/assistant.yml": "name: Chat\nconnector: use::heavy\n"})
    out = io.StringIO()
    assert main(["--app", str(app), "validate"], out=out) == 0
    assert out.getvalue().splitlines()[0].startswith("warning: assistants/chat/assistant.yml:2 connector: role 'heavy'")


def test_not_an_app_is_a_usage_error(tmp_path: Path) -> None:
    done = run_cli("validate", "--app", str(tmp_path))
    assert done.returncode == 2
    assert done.stderr.startswith("error: no app at ")


def test_assistants_table_lists_id_name_connector_hook_and_servers() -> None:
    done = run_cli("assistants")
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines() if line.strip()]
    assert rows[0] == ["id", "name", "connector", "hook", "MCP", "servers"]
    assert ["concierge", "Concierge", "use::light", "hooks/concierge.ts", "-"] in rows
    assert ["weather", "Weather", "demo.weather", "-", "weather"] in rows


def test_schema_prints_the_shipped_schema() -> None:
    out = io.StringIO()
    assert main(["schema", "assistant"], out=out) == 0
    schema = json.loads(out.getvalue())
    assert schema["required"] == ["name"]
    assert "mcp" in schema["properties"]


def test_unknown_schema_kind_is_a_usage_error() -> None:
    done = run_cli("schema", "robot")
    assert done.returncode == 2
    assert "invalid choice: 'robot'" in done.stderr
