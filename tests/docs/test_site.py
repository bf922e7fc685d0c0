"""The site builds strictly (every link and anchor resolves), its generated reference pages hold what
the code has, and the hand-written pages name everything the code has that they list."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import typing
from html import unescape
from pathlib import Path

import pytest

from tests.support.docs import REPO, text
from yao_agent import events
from yao_agent.cli import build_parser
from yao_agent.dsl.schema import KINDS, load_schema
from yao_agent.errors import Exit
from yao_agent.vocabulary import TerminalReason


def plain(html: str) -> str:
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", html)).split())


@pytest.mark.slow
@pytest.mark.slow
def test_the_site_builds_strictly_with_the_reference_generated_from_the_code(tmp_path: Path) -> None:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    page = {name: plain((tmp_path / "reference" / name / "index.html").read_text("utf-8"))
            for name in ("cli", "dsl", "http", "events", "exit-codes")}  # fmt: skip
    assert "<!-- generated" not in "".join(page.values())
    commands = re.findall(r"^ {2}(\w+)", build_parser().format_help(), re.M)
    assert commands and [c for c in commands if f"yao-agent {c}" not in page["cli"]] == []
    for kind in KINDS:
        keys = load_schema(kind)["properties"]
        assert [k for k in keys if f"{k} " not in page["dsl"]] == [], kind
    routes = set(re.findall(r"\b(GET|POST|PUT|PATCH|DELETE) (/[\w/{}.]*)", page["http"]))
    glance = text("reference/http.md").split("## Routes at a glance")[1].split("\n## ")[0]
    listed = {re.sub(r"\{\w+\}", "{}", f"{method} {path}") for method, path in re.findall(r"`(\w+) (/[^`]*)`", glance)}
    assert len(routes) > 20 and "RunBody" in page["http"]
    assert sorted(r for r in routes if re.sub(r"\{\w+\}", "{}", " ".join(r)) not in listed) == []
    types = [cls.__dataclass_fields__["type"].default for cls in typing.get_args(events.Event)]
    assert [t for t in types if t not in page["events"]] == []
    assert [e.name for e in Exit if f"{e.value} {e.name}" not in page["exit-codes"]] == []
    assert not (tmp_path / "hooks.py").exists()  # the build's own code is not published


def test_the_events_page_describes_every_event_and_every_reason_the_code_has() -> None:
    page = text("reference/events.md")
    described = re.findall(r"^\| `(\w+)` \|", page, re.M)
    types = [cls.__dataclass_fields__["type"].default for cls in typing.get_args(events.Event)]
    assert described == types
    reasons = page.split("`reason` is one of ")[1].split("Messages of a")[0]
    assert [r for r in typing.get_args(TerminalReason) if f"`{r}`" not in reasons] == []


def test_the_configuration_page_names_every_variable_the_code_reads() -> None:
    code = "".join(p.read_text("utf-8") for p in (REPO / "yao_agent").rglob("*.py"))
    read = set(re.findall(r"\b(YAO_AGENT_[A-Z_]+|PROMETHEUS_MULTIPROC_DIR|OTEL_[A-Z_]+)\b", code))
    page = text("reference/configuration.md")
    named = set(re.findall(r"`([A-Z][A-Z_]+)`", page))
    assert read - named <= {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"}, "a variable the code reads is not on the page"
    assert "`OTEL_*`" in page  # (the SDK's own: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT among them)
    assert {n for n in named if n.startswith("YAO_AGENT_")} <= read, "the page names a variable nothing reads"
