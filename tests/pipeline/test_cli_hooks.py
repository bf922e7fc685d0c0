"""`yao-agent chat concierge` on the example app, offline: its Create and Next hooks at work, as a user sees them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.pipeline.test_cli_chat import REPO, cli

LONG = "Could you explain in detail how the light and heavy roles differ, and when this app uses each of them?"


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # the heavy role's first connector then fails over, offline
    return f"sqlite:///{tmp_path / 'agent.db'}"


def next_data(shown: str) -> dict[str, object]:
    [line] = [line for line in shown.splitlines() if line.startswith("next: ")]
    return json.loads(line.removeprefix("next: "))


def test_a_short_question_stays_on_the_light_role(db: str) -> None:
    code, shown = cli(REPO, "--db", db, "chat", "concierge", "What time is it?", "--chat", "short")
    assert code == 0, shown
    assert "You said: What time is it?" in shown  # demo.echo, the light role
    assert next_data(shown) == {"route": "light", "words": 6, "tools_used": 0}


def test_a_long_question_is_routed_to_the_heavy_role(db: str) -> None:
    assert len(LONG) > 80  # what the concierge's Create calls long
    code, shown = cli(REPO, "--db", db, "chat", "concierge", LONG, "--chat", "long")
    assert code == 0, shown
    assert "Here is a considered answer to: Could you explain" in shown  # demo.thinker, the heavy role
    assert "You said:" not in shown
    data = next_data(shown)
    assert data["route"] == "heavy" and data["tools_used"] == 0
    code, history = cli(REPO, "--db", db, "history", "long")
    assert code == 0 and history.splitlines()[0] == f"user: {LONG}"
