"""Every code block of the README and the site is exercised: app files validate as `yao-agent validate`
checks a file, every `yao-agent` command parses, Python compiles (and the marked examples run, in
test_examples.py), JavaScript compiles in V8, JSON parses."""

from __future__ import annotations

import ast
import contextlib
import io
import json
import re
import shlex
from typing import Any

import pytest
import yaml
from py_mini_racer import MiniRacer

from tests.support import REPO
from tests.support.docs import Block, every_block
from yao_agent.cli import build_parser
from yao_agent.dsl import checks
from yao_agent.dsl.schema import load_schema, validate
from yao_agent.dsl.source import parse

BLOCKS = every_block()
LANGUAGES = {"yaml", "bash", "python", "js", "ts", "json", "text"}  # text: what a command prints, not code
# Run by the tests that name them: test_examples.py, tests/testing/test_model.py, tests/server/test_hardening.py.
RUN_BY_NAME = {"python-api", "openai-client", "scripted-model", "server-defaults"}
NOT_RUN = 5  # blocks that say why they cannot run here; a new one is a decision, so this count changes with it
APP_FILE = re.compile(
    r"# (?P<path>(app\.yml|assistants/[\w./-]+/assistant\.yml|connectors/[\w./-]+\.yml|mcps/[\w.-]+\.yml"
    r"|evals/[\w./-]+\.yml))\n"
)
KINDS = {"app": "app", "assistants": "assistant", "connectors": "connector", "mcps": "mcp", "evals": "eval"}


def of(lang: str) -> list[Block]:
    return [b for b in BLOCKS if b.lang == lang]


def test_every_block_says_its_language_and_the_markers_are_the_expected_ones() -> None:
    assert {b.where: b.lang for b in BLOCKS if b.lang not in LANGUAGES} == {}
    named = {b.marker[1] for b in BLOCKS if b.marker and b.marker[0] == "docs-test"}
    assert named == RUN_BY_NAME
    not_run = [f"{b.where}: {b.marker[1]}" for b in BLOCKS if b.marker and b.marker[0] == "not-run"]
    assert len(not_run) == NOT_RUN, not_run
    assert [b.where for b in of("python") if b.marker is None] == []  # each one runs, or says why not


@pytest.mark.parametrize("block", of("yaml"), ids=lambda b: b.where)
def test_a_yaml_block_parses_and_an_app_file_validates(block: Block) -> None:
    value = yaml.safe_load(block.code)
    app_file = APP_FILE.match(block.code)
    if app_file is None:  # a fragment of something else (a scrape config, a list of `access` forms)
        assert value is None or isinstance(value, dict), block.where
        return
    path = app_file["path"]
    kind = KINDS[path.split("/")[0].removesuffix(".yml")]
    doc = parse(path, block.code)
    if not doc.problems:
        for at, message in validate(doc.value or {}, load_schema(kind)):
            doc.add(at, message)
        checks.check_file(kind, doc)
    assert [str(problem) for problem in doc.problems] == [], block.where


def commands(block: Block) -> list[list[str]]:
    """The `yao-agent` commands of a bash block: every one of its lines, or, when some lines start with
    `$ `, those alone (the others are what the commands print)."""
    lines = block.code.replace("\\\n", " ").splitlines()
    prompted = [line[2:] for line in lines if line.startswith("$ ")]
    found: list[list[str]] = []
    for line in prompted or lines:
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        segment: list[str] = []
        for word in [*lexer, ";"]:
            if not set(word) <= set("();<>|&"):
                segment.append(word)
                continue
            if set(word) & set("<>") and segment and segment[-1].isdigit():
                segment.pop()  # the 2 of `2>&1`
            # A command ends at `;`, `&&`, a pipe or a redirection. In `exec yao-agent yao-agent tokens …`
            # the first is the compose service: the command is the last `yao-agent` with words after it.
            starts = [i for i, w in enumerate(segment[:-1]) if w == "yao-agent" or w.endswith("/bin/yao-agent")]
            found += [segment[starts[-1] + 1 :]] if starts else []
            segment = []
    return found


def parse_error(args: list[str]) -> str | None:
    said = io.StringIO()
    with contextlib.redirect_stderr(said):
        try:
            build_parser().parse_args(args)
        except SystemExit:
            return said.getvalue().strip().splitlines()[-1]
    return None


def test_every_yao_agent_command_of_the_bash_blocks_parses() -> None:
    found = [(b.where, args) for b in of("bash") for args in commands(b)]
    assert len(found) >= 35, "the scan finds fewer commands than the pages show"
    assert [(where, " ".join(args), parse_error(args)) for where, args in found if parse_error(args)] == []


@pytest.mark.parametrize("block", of("python"), ids=lambda b: b.where)
def test_a_python_block_compiles(block: Block) -> None:
    compile(block.code, block.where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)


def test_every_js_block_compiles_in_v8() -> None:
    blocks = of("js")
    assert blocks
    for block in blocks:
        source = json.dumps(block.code)  # compiled, not run: `new Function` only parses its body
        said = MiniRacer().eval(f"try {{ new Function({source}); 'ok' }} catch (e) {{ String(e) }}")
        assert said == "ok", block.where


def test_every_ts_block_compiles_in_v8_once_its_types_are_removed() -> None:
    blocks = of("ts")
    assert blocks
    racer = MiniRacer()
    racer.eval((REPO / "yao_agent/hooks/vendor/sucrase.js").read_text("utf-8"))
    for block in blocks:
        stripped = racer.eval(f"__yao_strip({json.dumps(block.code)})")
        said = racer.eval(f"try {{ new Function({json.dumps(stripped)}); 'ok' }} catch (e) {{ String(e) }}")
        assert said == "ok", block.where


@pytest.mark.parametrize("block", of("json"), ids=lambda b: b.where)
def test_a_json_block_parses(block: Block) -> None:
    value: Any = json.loads(block.code)
    assert isinstance(value, dict | list)
