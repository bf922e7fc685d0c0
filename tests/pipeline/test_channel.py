"""The channel between a run and its reader: a tap takes what is sent while the reader waits, in order."""

from __future__ import annotations

import asyncio

import pytest

from yao_agent.events import Event, MessageDelta, MessageStart
from yao_agent.pipeline.channel import EventChannel


def delta(text: str) -> MessageDelta:
    return MessageDelta("run_1", "msg_1", "text", text=text)


async def read(channel: EventChannel) -> list[list[Event]]:
    return [batch async for batch in channel.batches()]


async def test_what_is_sent_while_the_reader_waits_goes_to_the_tap_in_one_batch_per_turn_of_the_loop() -> None:
    channel, tapped = EventChannel(), list[list[Event]]()
    channel.send(start := MessageStart("run_1", "msg_1", "text"))  # before the reader waits: the reader's
    reader = asyncio.create_task(read(channel))
    await asyncio.sleep(0)
    channel.tap(lambda batch: tapped.append(batch) is None)
    channel.send(one := delta("a"))
    channel.send(two := delta("b"))  # sent in the same turn: one batch, one write
    await asyncio.sleep(0)
    channel.send(three := delta("c"))
    await asyncio.sleep(0)
    channel.close()
    assert await reader == [[start]]
    assert tapped == [[one, two], [three]]


async def test_a_tap_that_cannot_write_now_leaves_the_events_to_the_reader() -> None:
    channel, offered = EventChannel(), list[list[Event]]()

    def declines(batch: list[Event]) -> bool:
        offered.append(batch)
        return False

    reader = asyncio.create_task(read(channel))
    await asyncio.sleep(0)
    channel.tap(declines)
    channel.send(one := delta("a"))
    await asyncio.sleep(0)
    channel.send(two := delta("b"))  # the reader was woken for the first: this one waits for it, untapped
    channel.close()
    assert await reader == [[one, two]]
    assert offered == [[one]]


async def test_the_end_comes_after_what_the_tap_took() -> None:
    channel, tapped = EventChannel(), list[list[Event]]()
    reader = asyncio.create_task(read(channel))
    await asyncio.sleep(0)
    channel.tap(lambda batch: tapped.append(batch) is None)
    channel.send(one := delta("a"))
    await asyncio.sleep(0)
    channel.send(two := delta("b"))
    channel.close()  # the reader is woken in the same turn: it takes what came with the end, in order
    assert await reader == [[two]]
    assert tapped == [[one]]


async def test_a_tap_that_fails_fails_the_reader() -> None:
    channel = EventChannel()

    def broken(batch: list[Event]) -> bool:
        raise ValueError("a bug in a route's frames")

    reader = asyncio.create_task(read(channel))
    await asyncio.sleep(0)
    channel.tap(broken)
    channel.send(delta("a"))
    with pytest.raises(ValueError, match="a bug"):
        await reader
