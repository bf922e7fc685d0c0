"""Configuration is resolved in one place (yao_agent/settings.py), and the configuration page lists
exactly what that place reads: a variable added in code and not documented, or documented and no
longer read, fails here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.support.docs import DOCS, REPO
from yao_agent import settings

PAGE = DOCS / "reference" / "configuration.md"


def table_variables() -> set[str]:
    """The variables the page's table names in its first column."""
    section = PAGE.read_text("utf-8").split("## Environment variables", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return {name for row in rows for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", row.split("|")[1])}


def test_the_configuration_page_lists_every_variable_settings_reads() -> None:
    ours = set(settings.VARIABLES)
    listed = {name for name in table_variables() if name.startswith("YAO_AGENT_") or name in ours}
    assert sorted(ours - listed) == [], "documented nowhere: add a row to docs/reference/configuration.md"
    assert sorted(listed - ours) == [], "documented but not read through yao_agent/settings.py"


def reads_of_our_variables(path: Path, root: Path = REPO) -> list[str]:
    """`os.environ.get("YAO_AGENT_…")`, `os.getenv(…)`, `environ["YAO_AGENT_…"]`: a module reading one of
    our variables itself, past settings.py."""
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        key = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            if node.func.attr in ("get", "getenv", "pop", "setdefault"):
                key = node.args[0]
        elif isinstance(node, ast.Subscript):
            key = node.slice
        if isinstance(key, ast.Constant) and isinstance(key.value, str) and key.value.startswith("YAO_AGENT_"):
            found.append(f"{path.relative_to(root)}:{key.lineno} {key.value}")
    return found


def test_no_module_but_settings_reads_our_environment_variables() -> None:
    package = REPO / "yao_agent"
    found = [hit for path in sorted(package.rglob("*.py")) if path.name != "settings.py"
             for hit in reads_of_our_variables(path)]  # fmt: skip
    assert found == []


def test_the_scan_sees_a_read(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text('import os\nx = os.environ.get("YAO_AGENT_DB")\ny = os.environ["YAO_AGENT_APP"]\n')
    assert reads_of_our_variables(module, tmp_path) == ["m.py:2 YAO_AGENT_DB", "m.py:3 YAO_AGENT_APP"]
