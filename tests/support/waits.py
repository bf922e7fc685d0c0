"""Small waits and ports shared by the tool tests."""

from __future__ import annotations

import asyncio
import inspect
import socket
import time
from collections.abc import Callable
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def reached(marker: Path | str, stage: str) -> bool:
    """Whether `nap_marked` got to `stage`: "started", "finished", or "cancelled" (it was stopped)."""
    return Path(f"{marker}.{stage}").exists()


async def wait_until(condition: Callable[[], object], within: float = 30.0) -> None:
    """Until `condition()` (awaited if it is a coroutine) is true: the witness of a state no event announces
    (a file a tool wrote, a process gone, a row stored). `within` is far longer than the state ever takes
    to come, so only a state that never comes fails the test, loudly, naming the condition."""
    deadline = time.monotonic() + within
    while True:
        held = condition()
        if inspect.isawaitable(held):
            held = await held
        if held:
            return
        what = getattr(condition, "__name__", repr(condition))
        assert time.monotonic() < deadline, f"not reached within {within:g} s: {what}"
        await asyncio.sleep(0.02)
