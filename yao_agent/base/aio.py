"""Small asyncio pieces several layers need: seeing work through to its end when a cancel arrives."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def finish_despite_cancel(work: Awaitable[T]) -> T:
    """Await `work` to the end even if this task is cancelled meanwhile; re-raise the cancel after."""
    task = asyncio.ensure_future(work)
    cancelled = False
    while True:
        try:
            result = await asyncio.shield(task)
            break
        except asyncio.CancelledError:
            if task.done():
                raise
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    return result


async def wait_despite_cancel(work: Awaitable[object]) -> bool:
    """Await `work` to the end; whether a cancel arrived meanwhile (absorbed, and reported instead)."""
    task = asyncio.ensure_future(work)
    cancelled = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.cancelled():
                raise
            uncancel()
            cancelled = True
    return cancelled


def uncancel() -> None:
    """This task has handled the cancel it was sent: later awaits are not cancelled again."""
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()
