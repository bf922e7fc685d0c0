"""Small waits and ports shared by the tool tests."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SERVERS_PY = str(REPO / "tests" / "tools" / "servers.py")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def reached(marker: Path, stage: str) -> bool:
    """Whether `nap_marked` got to `stage` ("started" or "finished")."""
    return Path(f"{marker}.{stage}").exists()


async def wait_until(condition: Callable[[], bool], within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)
