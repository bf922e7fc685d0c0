"""The package's modules import one another in one direction only: no import cycle, not even one held
open by an import inside a function or under `TYPE_CHECKING`, and no arrow from a floor up to a higher one."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.apps import make_app
from yao_agent.store.protocol import RunStore
from yao_agent.testing import FakeProvider

PACKAGE = Path(__file__).resolve().parents[1] / "yao_agent"
REPO = PACKAGE.parent
STORE = ("sqlalchemy", "yao_agent.store")
MODEL_SDKS = ("openai", "litellm", "aiohttp", "httpx")
# What a first run on an existing SQLite store never uses, so its process never imports (docs/performance.md,
# *First run*): SQLAlchemy's PostgreSQL dialect (store/spelled.py), Jinja2 without a template (dsl/templates.py).
ON_START_NEVER = ("sqlalchemy.dialects.postgresql", "jinja2", "markupsafe")
# What a command's fresh process imports, as the `yao-agent` script starts it: the list, on stderr's last line.
LOADED = """
import json, sys
from yao_agent.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py") if "migrations" not in p.parts}


def imported(name: str, path: Path, known: set[str]) -> Iterator[str]:
    """The package's modules `name` imports, wherever in the file the import is."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                target = f"{base}.{alias.name}"
                if target in known:
                    yield target  # `from package import module`
                elif base in known:
                    yield base


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), and modules importing themselves."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph[node]:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_package_has_no_import_cycle() -> None:
    found = modules()
    known = set(found)
    graph = {name: {t for t in imported(name, path, known) if t != name} for name, path in found.items()}
    assert cycles(graph) == []


def test_the_cycle_finder_finds_cycles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert cycles(graph) == [["a", "b", "c"], ["e"]]


# The floors of the house, lowest first: a module imports from its own floor or below, never above. A
# new package gets a floor here (the test below fails on a module that has none).
FLOORS: tuple[tuple[str, ...], ...] = (
    ("errors", "events", "messages", "shapes", "vocabulary", "identity", "ids", "base"),  # the words, and helpers
    ("dsl", "settings"),  # an app's files, read and checked; configuration resolved
    ("connectors", "hooks", "tools", "store", "metering", "guardrails"),  # what a run uses
    ("pipeline", "knowledge"),  # one run, stage by stage; documents cut into chunks and searched
    ("observe",),  # told of runs by the pipeline's observer seam, never imported by it
    ("service", "evals"),  # the one way in: runs, chats, tenancy; eval cases run through it
    ("server", "cli", "testing"),  # the doors, and the doubles tests give the doors
)


def floor(name: str) -> int:
    if name == "yao_agent":
        return len(FLOORS)  # the public API re-exports from every floor
    parts = name.split(".")
    return next(i for i, group in enumerate(FLOORS) if len(parts) > 1 and parts[1] in group)


def arrows_up(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    return sorted((a, b) for a, targets in graph.items() for b in targets if floor(b) > floor(a))


def test_no_module_imports_from_a_floor_above_its_own() -> None:
    found = modules()
    unplaced = [name for name in found if name != "yao_agent" and not any(
        name.split(".")[1] in group for group in FLOORS)]  # fmt: skip
    assert unplaced == [], "give these packages a floor in FLOORS"
    graph = {name: set(imported(name, path, set(found))) for name, path in found.items()}
    assert arrows_up(graph) == []


def test_the_floor_check_finds_an_arrow_up() -> None:
    graph: dict[str, set[str]] = {"yao_agent.pipeline.run": {"yao_agent.observe.logs", "yao_agent.errors"}}
    graph["yao_agent.errors"] = set()
    assert arrows_up(graph) == [("yao_agent.pipeline.run", "yao_agent.observe.logs")]


def store_calls(path: Path) -> Iterator[str]:
    """The methods called on `<something>.store` in a module."""
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            if isinstance(owner, ast.Attribute) and owner.attr == "store":
                yield node.func.attr


def test_the_pipeline_reaches_the_store_only_through_the_store_protocol() -> None:
    """A run's stages call only what `RunStore` (store/protocol.py) declares, and import none of the SQL
    store's parts: a store of another kind, or a test's, serves a run by implementing that protocol."""
    declared = {name for name in vars(RunStore) if not name.startswith("_")}
    found = modules()
    stages = {name: path for name, path in found.items() if name.startswith("yao_agent.pipeline.")}
    called = {(name, method) for name, path in stages.items() for method in store_calls(path)}
    assert called, "the scan found no store call in the pipeline: it no longer sees them"
    assert sorted((name, method) for name, method in called if method not in declared) == []
    inner = {"yao_agent.store.chats", "yao_agent.store.runlog", "yao_agent.store.tx", "yao_agent.store.sql"}
    reached = {(name, t) for name, path in stages.items() for t in imported(name, path, set(found)) if t in inner}
    assert sorted(reached) == []


def loaded_by(*args: str) -> set[str]:
    done = subprocess.run([sys.executable, "-c", LOADED, *args], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stderr.splitlines()[-1]))


def among(loaded: set[str], packages: tuple[str, ...]) -> list[str]:
    return sorted(name for name in loaded if name.split(".")[0] in packages or name.startswith(packages))


@pytest.mark.parametrize(
    ("args", "unwanted"),
    [
        (["--help"], (*STORE, *MODEL_SDKS, "yao_agent.dsl", "yao_agent.pipeline", "asyncio", "rich")),
        (["validate", "--app", str(REPO)], (*STORE, *MODEL_SDKS, "yao_agent.pipeline", "rich")),
        (["schema", "assistant"], (*STORE, *MODEL_SDKS, "yao_agent.pipeline")),
    ],
    ids=["help", "validate", "schema"],
)
def test_a_command_that_runs_no_assistant_imports_no_store_and_no_model_sdk(
    args: list[str], unwanted: tuple[str, ...]
) -> None:
    """The cold commands people type most stay quick: what they never use is never imported."""
    loaded = loaded_by(*args)
    assert "yao_agent.cli" in loaded
    assert among(loaded, unwanted) == []


def test_a_chat_with_a_scripted_connector_imports_no_model_sdk(tmp_path: Path) -> None:
    app = make_app(tmp_path / "app", {"app.yml": "store: sqlite:///.yao/agent.db\nroles:\n  default: demo.echo\n"})
    loaded = loaded_by("--app", str(app), "chat", "chat", "hi")
    assert "sqlalchemy" in loaded  # (the run is stored)
    assert among(loaded, MODEL_SDKS) == []


def test_a_chat_over_a_plain_openai_endpoint_imports_neither_the_sdk_nor_numpy(tmp_path: Path) -> None:
    """The first run of a process pays for what it uses: the engine says the SDK's headers itself, and
    vectors load with the first collection that has them."""
    with FakeProvider().running_in_thread() as provider:
        app = make_app(tmp_path / "app", {
            "app.yml": "store: sqlite:///.yao/agent.db\nroles:\n  default: demo.remote\n",
            "connectors/demo/remote.yml": f"type: openai\nmodel: text\nbase_url: {provider.base_url}\napi_key: sk-x\n",
        })  # fmt: skip
        loaded = loaded_by("--app", str(app), "chat", "chat", "hi")
        assert len(provider.requests) == 1
    assert "aiohttp" in loaded  # (the engine's own HTTP)
    assert among(loaded, ("openai", "litellm", "httpx", "httpx2", "numpy")) == []


def test_a_chat_on_a_store_made_before_imports_only_what_its_run_uses(tmp_path: Path) -> None:
    """A process's first run, once the store exists, pays for neither the migrations nor what it never uses
    (here no template: the reply is plain text)."""
    app = make_app(tmp_path / "app", {
        "app.yml": "store: sqlite:///.yao/agent.db\nroles:\n  default: demo.echo\n",
        "connectors/demo/echo.yml": "type: scripted\nrules:\n  - reply: 'Hello world'\n",
    })  # fmt: skip
    assert "alembic" in loaded_by("--app", str(app), "chat", "chat", "hi")  # (makes the store)
    loaded = loaded_by("--app", str(app), "chat", "chat", "hi")
    assert "sqlalchemy" in loaded
    assert among(loaded, ("alembic", *ON_START_NEVER)) == []


def test_the_tests_import_only_the_support_package_of_the_suite() -> None:
    """What tests share lives in `tests.support`: a test module or a conftest imported elsewhere would run its
    tests twice, or hand its fixtures on by a side door, and one module's change would break another's."""
    wrong: list[str] = []
    for path in sorted((REPO / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = "." * node.level + (node.module or "")
                targets = [f"{base}.{alias.name}" for alias in node.names]
            else:
                continue
            for target in targets:
                inside = target.split(".")[0] == "tests" and target.split(".")[1:2] != ["support"]
                leaves = target.split(".")
                if inside or any(part.startswith("test_") or part == "conftest" for part in leaves):
                    wrong.append(f"{path.relative_to(REPO)}:{node.lineno} imports {target}")
    assert wrong == []


def oversized(limit_methods: int = 25, limit_lines: int = 60) -> tuple[list[str], list[str]]:
    """The package's classes with more than `limit_methods` methods, and its functions (methods too) of more
    than `limit_lines` lines, from `def` to their last line."""
    classes: list[str] = []
    functions: list[str] = []
    for name, path in sorted(modules().items()):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.ClassDef):
                methods = [n for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
                if len(methods) > limit_methods:
                    classes.append(f"{name}.{node.name}: {len(methods)} methods")
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > limit_lines:
                    functions.append(f"{name}.{node.name}: {lines} lines")
    return classes, functions


def test_no_class_has_more_than_25_methods_and_no_function_more_than_60_lines() -> None:
    """A class of more than 25 methods serves more than one concern, and a function of more than 60 lines
    takes more than one step: split them (as `Runs` was into runs, chats, tenancy and the process)."""
    assert oversized() == ([], [])


def test_the_size_scan_sees_classes_and_functions() -> None:
    """The scan finds what is over a limit (else a change to the AST walk could make it pass on nothing)."""
    classes, functions = oversized(limit_methods=10, limit_lines=40)
    assert any(found.startswith("yao_agent.service.runs.Runs: ") for found in classes)
    assert functions
