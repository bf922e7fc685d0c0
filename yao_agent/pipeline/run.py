"""The pipeline: one run, stage by stage, in the order of CONTRACT §4.

    1 permission  → 2 admission → 3 buffer (flushed in `finally`) → 4 connector → 5 history
    → 6 Create hook → 7 LLM → 8 tools → 9 Next hook / tool loop / standard → 10 close

`Runs.start` (yao_agent/service/runs.py) checks a request (stage 1) and gives it its place in the chat's line
(stage 2); from there the run executes here, in its own task, and streams typed events through a
channel. Whatever happens — success, a provider error, a cancel, a bug raising mid-run — the buffer is
flushed, and `stream_end` is sent once, after the flush.
"""

from __future__ import annotations

import asyncio

from yao_agent.base.aio import finish_despite_cancel, uncancel
from yao_agent.errors import RunError, RunTimeout
from yao_agent.events import StreamStart
from yao_agent.ids import bind_run
from yao_agent.pipeline import approvals, carry, close, connector, delegate, guard, history, observe, turns
from yao_agent.pipeline.admission import Admission, Ticket
from yao_agent.pipeline.buffer import log
from yao_agent.pipeline.outcomes import End, Wait
from yao_agent.pipeline.runtime import Runtime
from yao_agent.pipeline.state import RunState
from yao_agent.store.records import LeaseRelease


async def execute(rt: Runtime, state: RunState, admission: Admission, ticket: Ticket) -> None:
    """The run's own task: wait for the chat, the stages in order, the flush, then `stream_end`."""
    state.begun = True
    run = state.run
    # this task's context (a copy of its creator's): every line the run logs, its hooks' and tools' too, has its ids
    bind_run(run_id=run.id, chat_id=run.chat_id, trace_id=run.trace_id, team_id=state.identity.team_id,
              user_id=state.identity.user_id, assistant_id=run.assistant_id)  # fmt: skip
    await state.emit(StreamStart(run.id, run.chat_id, run.assistant_id, run.trace_id, run.app_version or ""))
    outcome: BaseException | Wait | None = None
    try:
        async with admission.enter(ticket) as cancelled_before_its_turn:  # 2. admission
            try:  # 3. buffer: everything below is flushed in `finally`, while the chat is still held
                if cancelled_before_its_turn or state.cancel_requested:
                    raise asyncio.CancelledError
                async with asyncio.timeout(rt.app.config.limits.timeout_s):
                    ended = await work(rt, state)
                outcome = ended if isinstance(ended, Wait) else None
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
                guard.settle_appended(rt, state)  # appended after the last model call: checked before it is kept
                turns.fold_appended(rt, state)  # appended while a call that then failed ran: kept, if unanswered
                await close.settle(rt, state, outcome)
                try:
                    letting_go = admission.letting_go(ticket)
                    if await finish_despite_cancel(flush(rt, state, letting_go)) and letting_go is not None:
                        admission.let_go(ticket)
                except asyncio.CancelledError:
                    uncancel()  # a cancel during the flush: the outcome was already settled and is now stored
    finally:
        state.input_checked.set()  # (a run that ended before its input was checked: nobody waits for ever)
        observe.run_ended(state)  # stored by now: metrics and traces see what the store has
        await state.emit(close.stream_end(state))  # 10. close
        state.out.close()
    if isinstance(outcome, BaseException) and not isinstance(outcome, RunError | asyncio.CancelledError):
        raise outcome  # a bug: stored and reported above, and not hidden from the caller


async def work(rt: Runtime, state: RunState) -> End:
    state.children = delegate.Children(rt, turns.converse)  # how its hooks start child runs
    carry.restore(state)  # a resume continues the run it resumes: its counters, guards and choices
    await guard.check_input(rt, state)  # the input guardrails, before anything reads or stores the input
    await connector.resolve(rt, state)  # 4. connector
    await history.load(rt, state)  # 5. history, and the clean input written ahead
    return await turns.converse(rt, state)  # 6–9. Create hook, LLM, tools, Next hook / tool loop


async def flush(rt: Runtime, state: RunState, release: LeaseRelease | None = None) -> bool:
    """Write the run's messages and steps the journal did not commit, and its outcome, in one transaction
    (input first, if not yet), the chat's lease let go in it when `release` says so; whether it was stored."""
    try:
        if not state.stored:
            await history.load(rt, state)
        messages, steps = state.buffer.pending()  # what the step journal has not committed yet
        state.run.carry = carry.snapshot(state)  # what the run decided, for a resume of it
        waiting = approvals.to_store(state) if state.run.status == "waiting" else ()  # the calls it stopped for
        await rt.store.finish_run(state.identity, state.run, messages, steps, waiting, release)
    except Exception:
        log.exception("run %s could not be stored", state.run_id)
        return False
    return True


__all__ = ["execute", "flush", "work"]
