"""What users read cites nothing they do not have: no section of the project's internal contract in
the README, the docs, the OpenAPI document or any command's help; and the examples of the README and the
docs reach the server where it listens by default."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

from tests.support.docs import pages
from yao_agent.cli import build_parser
from yao_agent.server.app import create_app
from yao_agent.service.runs import Runs

REPO = Path(__file__).resolve().parents[1]
INTERNAL = re.compile(r"CONTRACT|§")
DEFAULT_PORT = "8765"  # `serve`'s (app.yml server.port)


def documents() -> list[Path]:
    # Bytecode is written next to docs/hooks.py when the site is built, and the pictures (docs/images) are
    # pictures: neither is a text users read.
    written = (p for p in (REPO / "docs").rglob("*")
               if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".png")  # fmt: skip
    return [REPO / "README.md", *written]


def cited(text: str) -> list[str]:
    return [text[max(0, m.start() - 40) : m.end() + 10] for m in INTERNAL.finditer(text)]


@pytest.mark.parametrize("path", documents(), ids=lambda p: str(p.relative_to(REPO)))
def test_the_docs_cite_no_internal_contract(path: Path) -> None:
    assert cited(path.read_text("utf-8")) == []


def test_the_examples_call_the_server_on_its_default_port() -> None:
    text = "".join(page.read_text("utf-8") for page in pages())
    ports = re.findall(r"(?:localhost|127\.0\.0\.1):(\d+)/(?:api|v1|healthz|readyz|metrics)", text)
    assert ports, "the scan found no example: it no longer sees them"
    assert sorted(set(ports)) == [DEFAULT_PORT]


def helps(parser: argparse.ArgumentParser) -> list[str]:
    """The help of a parser and of every command under it."""
    found = [parser.format_help()]
    for action in parser._actions:  # pyright: ignore[reportPrivateUsage]  (argparse lists sub-parsers nowhere else)
        if isinstance(action, argparse._SubParsersAction):  # pyright: ignore[reportPrivateUsage]
            for sub in action.choices.values():  # pyright: ignore[reportUnknownVariableType, reportUnknownMemberType]
                found += helps(sub)  # pyright: ignore[reportUnknownArgumentType]
    return found


def test_no_command_help_cites_the_internal_contract() -> None:
    texts = helps(build_parser())
    assert len(texts) > 20
    assert [c for text in texts for c in cited(text)] == []


async def test_the_openapi_document_cites_no_internal_contract(tmp_path: Path) -> None:
    runs = await Runs.open(REPO, db=f"sqlite:///{tmp_path / 'agent.db'}")
    try:
        document = json.dumps(create_app(runs).openapi(), ensure_ascii=False)
    finally:
        await runs.aclose()
    assert cited(document) == []
