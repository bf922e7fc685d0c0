"""The app changed while it serves (CONTRACT §8.4): a valid change applies to the runs that start after it,
a run in flight finishes on its own version, a broken change keeps the last good version serving and says
why at `GET /api/app`, and only the app's own files are watched."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import pytest

from tests.support.apps import make_app
from tests.support.runtimes import ALICE, CHAT, app_files, close, end_of
from tests.support.servers import Live, said, serving
from tests.support.tools import call, in_process, tooled
from tests.support.waits import reached, wait_until
from yao_agent.events import Event, StreamStart
from yao_agent.identity import OPERATOR
from yao_agent.pipeline import RunRequest
from yao_agent.server.reload import Reloader
from yao_agent.server.serve import listen, server
from yao_agent.service.runs import Runs
from yao_agent.store import SqlStore
from yao_agent.testing import FakeProvider, Reply, ScriptedModel

pytestmark = pytest.mark.both_stores  # what it tests is what the database does

TOOLED = "name: Tooled\nmcp:\n  servers: [testing]\nprompts:\n  - role: system\n    content: You are version {n}.\n"


@pytest.fixture
async def served(tmp_path: Path, store: SqlStore, fake: ScriptedModel) -> AsyncIterator[tuple[Runs, Reloader]]:
    rt = in_process(tooled(tmp_path / "app", store, fake, assistant=TOOLED.format(n=1)))
    runs = Runs(rt)
    reloader = Reloader(runs)
    try:
        yield runs, reloader
    finally:
        await reloader.aclose()
        await close(runs.rt)  # (the store is the fixture's to close)


def edit(runs: Runs, n: int) -> None:
    (runs.app.root / "assistants/tooled/assistant.yml").write_text(TOOLED.format(n=n))


def system_prompts(fake: ScriptedModel) -> list[str]:
    return [request.messages[0]["content"] for request in fake.requests]


async def start(runs: Runs, text: str, chat_id: str) -> tuple[str, asyncio.Task[list[Event]]]:
    """A run of the tooled assistant: its app version (from `stream_start`) and the task reading the rest."""
    handle = await runs.start(RunRequest("tooled", ALICE, [{"role": "user", "content": text}], chat_id=chat_id))
    events = aiter(handle.events())
    first = await anext(events)
    assert isinstance(first, StreamStart)

    async def rest() -> list[Event]:
        return [first, *[event async for event in events]]

    return first.app_version, asyncio.create_task(rest())


async def test_a_valid_change_applies_to_the_next_run_and_the_run_in_flight_keeps_its_version(
    served: tuple[Runs, Reloader], fake: ScriptedModel, tmp_path: Path
) -> None:
    runs, reloader = served
    marker = tmp_path / "nap"
    nap = call("testing__nap_marked", {"seconds": 1, "marker": str(marker)}, "n1")
    fake.enqueue(Reply(tool_calls=(nap,)), Reply(text="done napping"), Reply(text="fresh"))
    before, in_flight = await start(runs, "nap first", "c1")
    await wait_until(lambda: reached(marker, "started"))  # its first model call is made, its tool runs
    edit(runs, 2)
    assert await reloader.reload("test")
    after, next_run = await start(runs, "hello", "c2")
    assert before and after and before != after
    assert end_of(await in_flight).status == "completed" and end_of(await next_run).status == "completed"
    # The run in flight made its second model call after the change, on its own version still.
    asked = sorted((r.messages[1]["content"], r.messages[0]["content"]) for r in fake.requests)
    assert asked == [
        ("hello", "You are version 2."),
        ("nap first", "You are version 1."),
        ("nap first", "You are version 1."),
    ]
    stored = [await runs.rt.store.latest_run(ALICE, chat) for chat in ("c1", "c2")]
    assert [run.app_version for run in stored if run is not None] == [before, after]
    view = await runs.run_view(ALICE, "c1", stored[0].id if stored[0] else "")
    assert view.to_api()["app_version"] == before


async def test_a_broken_change_keeps_the_last_good_version_and_says_where(
    served: tuple[Runs, Reloader], fake: ScriptedModel
) -> None:
    runs, reloader = served
    good = runs.app.version
    path = runs.app.root / "assistants/tooled/assistant.yml"
    path.write_text("name: Tooled\nmcp:\n  servers: [nowhere]\n")
    assert not await reloader.reload("test")
    assert runs.app.version == good
    [problem] = reloader.view()["errors"]  # type: ignore[misc]
    assert problem["file"] == "assistants/tooled/assistant.yml" and problem["line"] == 3  # type: ignore[index]
    assert "nowhere" in problem["text"]  # type: ignore[index]
    fake.enqueue(Reply(text="still here"))
    _, run = await start(runs, "hi", "c1")
    assert end_of(await run).status == "completed"
    assert system_prompts(fake) == ["You are version 1."]
    edit(runs, 3)  # fixed: served, and the errors are gone
    assert await reloader.reload("test") and reloader.view()["errors"] == [] and runs.app.version != good


HOOKED = TOOLED.format(n=1) + "hook: hooks/h.js\n"
NEXT = "function Next(ctx, payload) {{\n  return {{data: {{hook: {n}}}}};\n}}\n"
BROKEN = "function Next(ctx, payload) {\n  return {data: {hook: 3} ;\n}\n"


@pytest.fixture
async def hooked(tmp_path: Path, store: SqlStore, fake: ScriptedModel) -> AsyncIterator[tuple[Runs, Reloader]]:
    """A served app whose assistant has a Next hook saying which version of it ran."""
    files = {"hooks/h.js": NEXT.format(n=1)}
    rt = in_process(tooled(tmp_path / "app", store, fake, assistant=HOOKED, more=files))
    runs = Runs(rt)
    reloader = Reloader(runs)
    try:
        yield runs, reloader
    finally:
        await reloader.aclose()
        await close(runs.rt)


def edit_hook(runs: Runs, source: str) -> None:
    (runs.app.root / "hooks/h.js").write_text(source)


async def test_a_hook_that_does_not_compile_is_held_back_and_says_where(
    hooked: tuple[Runs, Reloader], fake: ScriptedModel
) -> None:
    runs, reloader = hooked
    good = runs.app.version
    edit_hook(runs, BROKEN)
    assert not await reloader.reload("test")
    assert runs.app.version == good
    [problem] = reloader.view()["errors"]  # type: ignore[misc]
    assert (problem["file"], problem["line"]) == ("hooks/h.js", 2)  # type: ignore[index]
    assert problem["text"] == "hooks/h.js:2: SyntaxError: Unexpected token ';'"  # type: ignore[index]
    fake.enqueue(Reply(text="still here"))
    _, run = await start(runs, "hi", "c1")
    assert end_of(await run).next == {"hook": 1}  # the last good version's hook still serves
    edit_hook(runs, NEXT.format(n=2))  # fixed: served, and the errors are gone
    assert await reloader.reload("test") and reloader.view()["errors"] == []
    fake.enqueue(Reply(text="new"))
    _, run = await start(runs, "hi", "c2")
    assert end_of(await run).next == {"hook": 2}


async def test_a_run_in_flight_keeps_the_hook_code_it_started_with(
    hooked: tuple[Runs, Reloader], fake: ScriptedModel, tmp_path: Path
) -> None:
    runs, reloader = hooked
    marker = tmp_path / "nap"
    nap = call("testing__nap_marked", {"seconds": 1, "marker": str(marker)}, "n1")
    fake.enqueue(Reply(tool_calls=(nap,)), Reply(text="done napping"), Reply(text="fresh"))
    before, in_flight = await start(runs, "nap first", "c1")
    await wait_until(lambda: reached(marker, "started"))  # its tool runs; its Next hook is still to be called
    edit_hook(runs, NEXT.format(n=2))
    assert await reloader.reload("test")
    after, next_run = await start(runs, "hello", "c2")
    assert before != after
    assert end_of(await in_flight).next == {"hook": 1}
    assert end_of(await next_run).next == {"hook": 2}


async def test_the_watcher_reloads_on_a_change_of_the_apps_files_and_ignores_other_files(
    served: tuple[Runs, Reloader], fake: ScriptedModel
) -> None:
    runs, reloader = served
    reloader.start()
    await asyncio.sleep(0.3)  # (the watches are in place)
    first, checked = runs.app.version, reloader.checked_at
    (runs.app.root / "agent.db-wal").write_bytes(b"a store's churn")
    (runs.app.root / "notes.txt").write_text("not the app")
    await asyncio.sleep(1)
    assert reloader.checked_at == checked  # nothing of the app changed: nothing was read
    edit(runs, 2)
    await until(lambda: runs.app.version != first)
    fake.enqueue(Reply(text="new"))
    _, run = await start(runs, "hi", "c1")
    assert end_of(await run).status == "completed" and system_prompts(fake) == ["You are version 2."]


async def until(condition: Callable[[], bool], timeout_s: float = 10) -> None:
    async def poll() -> None:
        while not condition():  # noqa: ASYNC110
            await asyncio.sleep(0.02)

    await asyncio.wait_for(poll(), timeout_s)


async def test_app_state_is_for_team_admins(live: Live) -> None:
    async with live.client("bob_admin") as admin, live.client("carol") as member, live.client("alice") as solo:
        state = await admin.get("/api/app")
        assert state.status_code == 200
        assert state.json()["app_version"] == live.runs.app.version and state.json()["errors"] == []
        assert (await solo.get("/api/app")).status_code == 200  # a caller without a team administers itself
        refused = await member.get("/api/app")
        assert refused.status_code == 403 and refused.json()["error"]["type"] == "forbidden"
    async with live.client("") as anyone:
        ready = await anyone.get("/readyz")
        assert ready.json() == {"status": "ready", "app_version": live.runs.app.version}
        live.runs.process.draining = True
        refused = await anyone.get("/readyz")
        assert (refused.status_code, refused.json()["error"]["type"]) == (503, "unavailable")
        assert (await anyone.get("/healthz")).status_code == 200  # alive still, while it drains


def test_the_version_is_the_same_for_the_same_files_and_changes_with_a_hook(tmp_path: Path) -> None:
    from tests.support.apps import make_app
    from yao_agent.dsl import load_app

    files = {"assistants/hooked/assistant.yml": "name: Hooked\nhook: hooks/h.js\n",
             "hooks/h.js": "function Create() { return null }\n"}  # fmt: skip
    root = make_app(tmp_path / "app", files)
    first = load_app(root).version
    assert load_app(root).version == first and len(first) == 12
    (root / "hooks/h.js").write_text("function Create() { return {} }\n")
    assert load_app(root).version != first


@pytest.mark.slow
async def test_yao_agent_serve_holds_a_broken_hook_back_until_it_is_fixed(
    tmp_path: Path, store: SqlStore, store_raw_url: str
) -> None:
    """`yao-agent serve` in a process of its own, watching its files: a hook edited into a syntax error is
    logged as `file:line` and not served (runs keep the last good hook); fixed, it is served."""
    async with FakeProvider() as fake:
        files = {**app_files(fake.base_url), "hooks/h.js": NEXT.format(n=1)}
        files["assistants/chat/assistant.yml"] = CHAT + "hook: hooks/h.js\n"
        app = make_app(tmp_path / "app", files, base={})
        token = await store.create_token(OPERATOR, ALICE)
        err = tmp_path / "serve.err"
        async with (
            serving(app, store_raw_url, err) as url,
            httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as client,
        ):

            async def next_of(text: str) -> object:
                answer = await client.post("/api/assistants/chat/runs?stream=false", json={
                    "messages": [{"role": "user", "content": text}]})  # fmt: skip
                assert answer.status_code == 200, answer.text
                return answer.json()["next"]

            assert await next_of("one") == {"hook": 1}
            (app / "hooks/h.js").write_text(BROKEN)
            await until(lambda: "app not reloaded (files changed): hooks/h.js:2: SyntaxError" in said(err), 30)
            assert await next_of("two") == {"hook": 1}
            (app / "hooks/h.js").write_text(NEXT.format(n=2))
            await until(lambda: "app reloaded (files changed)" in said(err), 30)
            assert await next_of("three") == {"hook": 2}


async def test_app_state_shows_a_caller_the_problems_of_what_it_may_use_only(live: Live) -> None:
    """The problems name the app's files: a hidden assistant's, every connector's. A team admin sees those of
    the assistants and connectors its team may use; the rest is a count (the operator reads the log)."""
    root = live.runs.app.root
    (root / "assistants/private/assistant.yml").write_text("name: Private\naccess: {teams: [acme]}\nmodel: [\n")
    (root / "assistants/chat/assistant.yml").write_text("name: [unclosed\n")
    (root / "assistants/secret-plans").mkdir()
    (root / "assistants/secret-plans/assistant.yml").write_text("name: [unclosed\n")  # new: nobody's yet
    (root / "connectors/demo/echo.yml").write_text("type: scripted\nrules: [\n")
    sock = listen("127.0.0.1", 0)
    served = server(live.runs, "127.0.0.1", sock.getsockname()[1])
    task = asyncio.create_task(served.serve(sockets=[sock]))
    try:
        while not served.started:  # noqa: ASYNC110 (uvicorn says so by a flag alone)
            await asyncio.sleep(0.01)
        assert not await served.reloader.reload("test")
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        seen: dict[str, tuple[list[str], int]] = {}
        for name in ("alice", "bob_admin"):
            headers = {"Authorization": f"Bearer {live.tokens[name]}"}
            async with httpx.AsyncClient(base_url=url, headers=headers) as client:
                state = (await client.get("/api/app")).json()
            seen[name] = (sorted(e["file"] for e in state["errors"]), state["other_errors"])
    finally:
        served.should_exit = True
        await task
    everything = 4
    assert seen["alice"] == (["assistants/chat/assistant.yml", "connectors/demo/echo.yml"], everything - 2)
    assert seen["bob_admin"] == (["assistants/chat/assistant.yml", "assistants/private/assistant.yml",
                                  "connectors/demo/echo.yml"], everything - 3)  # fmt: skip
