"""A runtime closes everything it holds, whatever fails while it closes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.runtimes import app_files, make_runtime
from yao_agent.store import SqlStore, open_engine, store_url


class StoreThatSaysWhenClosed(SqlStore):
    closed = False

    async def aclose(self) -> None:
        await super().aclose()
        self.closed = True


class ToolsThatFailToStop:
    """A tool manager whose server would not stop (what `Runtime.tools` holds, failing as it closes)."""

    async def aclose(self) -> None:
        raise RuntimeError("a tool server did not stop")


async def test_the_store_is_closed_even_when_a_tool_server_fails_to_stop(tmp_path: Path) -> None:
    """Fixed: closing went step by step, so a tool server that failed to stop left the store open (and a
    PostgreSQL store's pooled connections to the garbage collector)."""
    store = StoreThatSaysWhenClosed(await open_engine(store_url("sqlite:///agent.db", tmp_path)))
    rt = make_runtime(tmp_path / "app", store, app_files("http://127.0.0.1:1/v1"))
    rt.tools = ToolsThatFailToStop()  # type: ignore[assignment]
    with pytest.raises(RuntimeError, match="did not stop"):
        await rt.aclose()
    assert store.closed
