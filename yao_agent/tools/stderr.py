"""A stdio MCP server's stderr: logged, never written to our terminal (it would tear a streamed reply).

The pipe is read in a thread so it works whatever the event loop is doing, and its end (EOF) tells us
when the server exited, which the MCP client does not say.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections import deque
from typing import TextIO

TAIL_LINES = 20


class StderrPump:
    """Owns one pipe: the child writes to `writer`; each line goes to `yao_agent.mcp.<server id>`."""

    def __init__(self, server_id: str, loop: asyncio.AbstractEventLoop) -> None:
        read_fd, write_fd = os.pipe()
        self.writer: TextIO = os.fdopen(write_fd, "w")
        self.exited_at: float | None = None  # time.monotonic() when the last writer closed the pipe
        self._loop = loop
        self._exited = asyncio.Event()
        self._tail: deque[str] = deque(maxlen=TAIL_LINES)
        self._log = logging.getLogger(f"yao_agent.mcp.{server_id}")
        self._thread = threading.Thread(target=self._pump, args=(read_fd,), name=f"mcp-stderr-{server_id}", daemon=True)
        self._thread.start()

    def release_writer(self) -> None:
        """Close our copy of the write end once the child has its own, so EOF means the child is gone."""
        self.writer.close()

    def last_line(self) -> str:
        return self._tail[-1] if self._tail else ""

    async def wait_exit(self, *, within: float) -> float | None:
        """When the server exited, waiting up to `within` seconds to find out; None if it still runs."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within):
                await self._exited.wait()
        return self.exited_at

    def _pump(self, read_fd: int) -> None:
        try:
            with open(read_fd, "rb") as stream:
                for raw in stream:
                    line = raw.decode("utf-8", "replace").rstrip()
                    if line.strip():
                        self._tail.append(line.strip())
                        self._log.info("%s", line)
        except OSError as exc:  # the pipe broke: treat it as the end, but say so
            self._log.warning("stopped reading the server's stderr: %s", exc)
        finally:
            self.exited_at = time.monotonic()
            with contextlib.suppress(RuntimeError):  # the loop is already closed: nobody is waiting
                self._loop.call_soon_threadsafe(self._exited.set)
