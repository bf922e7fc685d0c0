"""Stage 2, admission: one active run per chat, the others wait their turn (in this process)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager

from yao_agent.pipeline.runtime import Runtime
from yao_agent.pipeline.state import RunState


@asynccontextmanager
async def enter(rt: Runtime, state: RunState) -> AsyncGenerator[None]:
    lock = rt.chat_locks.setdefault(state.chat_id, asyncio.Lock())
    async with lock:
        yield
    if not lock.locked():
        rt.chat_locks.pop(state.chat_id, None)
