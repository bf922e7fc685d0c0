"""The pipeline: one run, stage by stage, in the order of CONTRACT §4.

    1 permission  → 2 admission → 3 buffer (flushed in `finally`) → 4 connector → 5 history
    → 6 Create hook → 7 LLM → 8 tools → 9 Next hook / tool loop / standard → 10 close

A run executes in its own task and streams typed events through a channel; `run_stream` yields
them, `run_once` drains the same stream. Whatever happens — success, a provider error, a cancel,
a bug raising mid-run — the buffer is flushed, and `stream_end` is sent once, after the flush.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from contextlib import aclosing

from yao_agent.aio import finish_despite_cancel, uncancel
from yao_agent.errors import ChatBusy, RunError, RunTimeout
from yao_agent.events import Event, StreamStart
from yao_agent.pipeline import close, connector, delegate, history, permission, turns
from yao_agent.pipeline.admission import Ticket
from yao_agent.pipeline.buffer import log
from yao_agent.pipeline.handle import RunHandle, RunResult
from yao_agent.pipeline.runtime import Runtime
from yao_agent.pipeline.state import RunRequest, RunState


async def execute(rt: Runtime, state: RunState, ticket: Ticket) -> None:
    """The run's own task: wait for the chat, the stages in order, the flush, then `stream_end`."""
    state.begun = True
    run = state.run
    await state.emit(StreamStart(run.id, run.chat_id, run.assistant_id, run.trace_id))
    outcome: BaseException | None = None
    try:
        async with rt.admission.enter(ticket) as cancelled_before_its_turn:  # 2. admission
            try:  # 3. buffer: everything below is flushed in `finally`, while the chat is still held
                if cancelled_before_its_turn or state.cancel_requested:
                    raise asyncio.CancelledError
                async with asyncio.timeout(rt.app.config.limits.timeout_s):
                    await work(rt, state)
            except TimeoutError:
                outcome = RunTimeout(
                    f"the run took longer than {rt.app.config.limits.timeout_s:g} s (limits.timeout_s)"
                )
            except asyncio.CancelledError as exc:
                outcome = exc
                uncancel()  # the cancel was for the run, and the run has handled it
            except Exception as exc:  # RunError, or a bug: either way the run is stored, then reported
                outcome = exc
            finally:
                turns.fold_appended(rt, state)  # appended while a call that then failed ran: kept, if unanswered
                await close.settle(rt, state, outcome)
                try:
                    await finish_despite_cancel(flush(rt, state))
                except asyncio.CancelledError:
                    uncancel()  # a cancel during the flush: the outcome was already settled and is now stored
    finally:
        await state.emit(close.stream_end(state))  # 10. close
        state.out.close()
    if outcome is not None and not isinstance(outcome, RunError | asyncio.CancelledError):
        raise outcome  # a bug: stored and reported above, and not hidden from the caller


async def work(rt: Runtime, state: RunState) -> None:
    state.children = delegate.Children(rt, turns.converse)  # how its hooks start child runs
    await connector.resolve(rt, state)  # 4. connector
    await history.load(rt, state)  # 5. history, and the clean input written ahead
    await turns.converse(rt, state)  # 6–9. Create hook, LLM, tools, Next hook / tool loop


async def flush(rt: Runtime, state: RunState) -> None:
    """Write the run's messages, steps and outcome in one transaction (input first, if not yet)."""
    try:
        if not state.stored:
            await history.load(rt, state)
        await rt.store.finish_run(state.identity, state.run, state.buffer.messages, state.buffer.steps)
    except Exception:
        log.exception("run %s could not be stored", state.run_id)


async def start(rt: Runtime, request: RunRequest) -> RunHandle:
    """Check the request (stage 1: errors are raised here, before anything exists) and start the run."""
    state = await permission.check(rt, request)
    on_busy = request.on_busy or state.assistant.on_busy
    if on_busy == "reject" and await rt.admission.held_elsewhere(state.chat_id):
        raise ChatBusy(f"chat '{state.chat_id}' is busy with a run in another process (on_busy: reject)")
    ticket = rt.admission.accept(state, on_busy)  # 2. may refuse (busy)
    handle = RunHandle.start(rt, state, execute(rt, state, ticket))
    ticket.cancel = handle.cancel  # registered before anything else can run: no cancel is ever missed
    return handle


async def run_stream(rt: Runtime, request: RunRequest) -> AsyncGenerator[Event]:
    """Run and stream its events. Leaving early cancels the run (which is still stored)."""
    handle = await start(rt, request)
    async with aclosing(handle.events()) as events:  # closing us closes it, which cancels the run
        async for event in events:
            yield event


async def run_once(rt: Runtime, request: RunRequest) -> RunResult:
    """Run to the end without streaming: the same run, its stream drained."""
    handle = await start(rt, request)
    async for _ in handle.events():
        pass
    return handle.result()


__all__ = ["RunResult", "RunState", "execute", "run_once", "run_stream", "start"]
