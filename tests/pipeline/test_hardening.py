"""The pipeline under what an app's author (or a hook) can get wrong on purpose or by mistake."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.support.runtimes import ALICE, app_files, end_of, make_runtime, turn
from yao_agent.store import SqlStore
from yao_agent.testing import Reply, ScriptedModel

pytestmark = pytest.mark.both_stores  # what it tests is what the database does


async def test_a_prompt_that_fails_to_render_ends_the_run_naming_its_file_and_line(
    tmp_path: Path, store: SqlStore, fake: ScriptedModel
) -> None:
    files = app_files(fake.base_url)
    files["assistants/chat/assistant.yml"] = "name: Chat\nprompts:\n  - role: system\n    content: '{{ 1 / 0 }}'\n"
    rt = make_runtime(tmp_path / "app", store, files, model=fake)
    fake.enqueue(Reply(text="never"))
    try:
        end = end_of(await turn(rt, "hi"))
        assert (end.status, end.reason) == ("failed", "prompt_error")  # the author's mistake, not ours
        assert end.error == {
            "file": "assistants/chat/assistant.yml",
            "line": 4,
            "message": "assistants/chat/assistant.yml:4 template failed to render (line 1 of the template): "
            "ZeroDivisionError: division by zero",
        }
        assert fake.requests == []
        run = await rt.store.latest_run(ALICE, "c1")
        assert run is not None and (run.status, run.reason) == ("failed", "prompt_error")
    finally:
        await rt.engines.aclose()


async def test_a_hook_file_replaced_by_a_fifo_blocks_neither_a_run_nor_a_reload(
    tmp_path: Path, store: SqlStore, fake: ScriptedModel
) -> None:
    """A run compiles the hook text its app version read (it never reads the file again); loading the
    folder again reads it, and refuses a FIFO instead of waiting for it."""
    import os

    from yao_agent.dsl import check_app

    files = app_files(fake.base_url)
    files["hooks/h.js"] = "function Create() { return null }\n"
    files["assistants/chat/assistant.yml"] = "name: Chat\nhook: hooks/h.js\n"
    rt = make_runtime(tmp_path / "app", store, files, model=fake)
    fake.enqueue(Reply(text="fine"), Reply(text="never"))
    try:
        assert end_of(await turn(rt, "hi")).status == "completed"
        hook = rt.app.root / "hooks" / "h.js"
        hook.unlink()
        os.mkfifo(hook)  # nobody will ever write to it: a plain read would wait for ever
        assert end_of(await turn(rt, "again")).status == "completed"
        [problem] = (await asyncio.to_thread(check_app, rt.app.root)).errors
        assert (problem.file, problem.message) == (
            "assistants/chat/assistant.yml",
            "hook file 'hooks/h.js' is not a regular file (expected a .js or .ts file)",
        )
    finally:
        await rt.engines.aclose()
        await rt.hooks.aclose()
