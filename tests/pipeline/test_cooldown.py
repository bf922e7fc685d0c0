"""Fallback chains skip a connector that failed lately, for its `cooldown_s`, across turns and chats."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.clock import Clock
from tests.support.runtimes import ALICE, app_files, end_of, make_runtime, turn
from yao_agent.connectors import Cooldowns, RetryPolicy
from yao_agent.events import FallbackEvent, StreamEnd
from yao_agent.pipeline import Runtime
from yao_agent.store import SqlStore
from yao_agent.testing import ScriptedModel

pytestmark = pytest.mark.both_stores  # what it tests is what the database does

Chained = Callable[..., Runtime]


@pytest.fixture
async def chained(tmp_path: Path, store: SqlStore, fake: ScriptedModel) -> AsyncIterator[Chained]:
    """Runtimes whose `default` is the chain [fake.first (model `first`: a fake provider scenario), fake.model]."""
    made: list[Runtime] = []

    def build(first: str, *, cooldown: str = "") -> Runtime:
        files = app_files(fake.base_url)
        files["app.yml"] = "roles:\n  default: [fake.first, fake.model]\n"
        files["connectors/fake/first.yml"] = (
            f"type: openai\nmodel: {first}\nbase_url: {fake.base_url}\napi_key: sk-x\n{cooldown}"
        )
        rt = make_runtime(tmp_path / "app", store, files, model=fake)
        rt.retry = RetryPolicy(max_attempts=3)  # a dead provider costs three attempts (the sleeps are skipped)
        made.append(rt)
        return rt

    yield build
    for rt in made:
        await rt.engines.aclose()


async def steps_shown(rt: Runtime, chat_id: str, run_id: str) -> list[dict[str, Any]]:
    """The run's steps as GET /api/chats/{id}/runs/{run_id} shows them."""
    view = await rt.store.run_view(ALICE, chat_id, run_id)
    assert view is not None
    steps: list[dict[str, Any]] = [dict(step) for step in view.to_api()["steps"]]
    return steps


def models_asked(fake: ScriptedModel) -> list[str]:
    return [r.model for r in fake.requests]


async def test_a_failed_link_is_skipped_until_its_cooldown_is_over(chained: Chained, fake: ScriptedModel) -> None:
    rt = chained("e500")
    clock = rt.cooldowns = Cooldowns(Clock())
    events = await turn(rt, "one", chat_id="c1")
    assert end_of(events).status == "completed"
    assert models_asked(fake) == ["e500", "e500", "e500", "text"]
    # The run's record says where the time went: three tries of the first link, then the answer.
    steps = await steps_shown(rt, "c1", end_of(events).run_id)
    assert [(s["status"], s["connector"], s.get("error", {}).get("kind")) for s in steps] == [
        *[("recovered", "fake.first", "server")] * 3, ("completed", "fake.model", None)]  # fmt: skip
    assert steps[-1]["fallbacks"][0]["reason"].startswith("model call to fake.first failed: provider error")

    fake.reset()
    events = await turn(rt, "two", chat_id="c2")  # another chat: the process remembers the connector
    assert end_of(events).status == "completed" and models_asked(fake) == ["text"]
    [skipped] = [e for e in events if isinstance(e, FallbackEvent)]
    assert (skipped.from_connector, skipped.to) == ("fake.first", "fake.model")
    assert skipped.reason == "skipped: it failed lately (30 s more)"
    [step] = await steps_shown(rt, "c2", end_of(events).run_id)  # no try: the skip is said with the answer
    assert step["fallbacks"] == [{"from": "fake.first", "to": "fake.model", "reason": skipped.reason}]

    fake.reset()
    assert isinstance(clock.clock, Clock)
    clock.clock.advance(31)
    await turn(rt, "three", chat_id="c3")
    assert models_asked(fake) == ["e500", "e500", "e500", "text"]  # tried again, once the 30 s are over


async def test_when_every_link_is_cooling_down_they_are_tried_anyway(chained: Chained, fake: ScriptedModel) -> None:
    rt = chained("e500")
    (rt.app.root / "connectors/fake/model.yml").write_text(f"type: openai\nmodel: e503\nbase_url: {fake.base_url}\n")
    from yao_agent.dsl import load_app

    rt.app = load_app(rt.app.root)
    assert end_of(await turn(rt, "one", chat_id="c1")).reason == "model_error"
    fake.reset()
    events = await turn(rt, "two", chat_id="c2")
    assert models_asked(fake) == ["e500"] * 3 + ["e503"] * 3
    end = end_of(events)
    assert isinstance(end, StreamEnd) and end.reason == "model_error"


async def test_cooldown_zero_never_skips(chained: Chained, fake: ScriptedModel) -> None:
    rt = chained("e500", cooldown="cooldown_s: 0\n")
    await turn(rt, "one", chat_id="c1")
    fake.reset()
    await turn(rt, "two", chat_id="c2")
    assert models_asked(fake) == ["e500", "e500", "e500", "text"]


async def test_a_request_the_provider_refuses_does_not_start_a_cooldown(chained: Chained, fake: ScriptedModel) -> None:
    rt = chained("e400")
    assert end_of(await turn(rt, "one", chat_id="c1")).reason == "model_error"  # a 400 does not fall back
    fake.reset()
    await turn(rt, "two", chat_id="c2")
    assert models_asked(fake) == ["e400"]
