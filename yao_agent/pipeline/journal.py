"""The step journal (CONTRACT §4 item 3): each step is committed the moment it completes.

A model reply after its last chunk (its message and `llm` steps), each tool call's result (and the
round's `tool` step once every call has one), each completed hook step: one small transaction each,
so a process killed mid-run loses at most the step in flight, and a resume continues after the last
committed one (store/journal.py finds it). Messages the run added before (an appended user message)
go with the next commit, so the chat keeps its order.

The flush in the pipeline's `finally` stays the one writer of the run's outcome, and writes only what
the journal did not. A commit that fails is logged and leaves the rest to the flush (no later commit
runs, so nothing is stored out of order); one in flight when the run is cancelled is seen through.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from yao_agent.base.aio import finish_despite_cancel
from yao_agent.messages import ChatMessage
from yao_agent.pipeline import carry
from yao_agent.pipeline.runtime import Runtime
from yao_agent.pipeline.state import RunState
from yao_agent.store.records import StepRecord

log = logging.getLogger("yao_agent.run")


async def commit(
    rt: Runtime, state: RunState, messages: Sequence[ChatMessage] = (), steps: Sequence[StepRecord] = ()
) -> None:
    """Commit `messages` and `steps` (completed ones), after what the run's buffer holds uncommitted."""
    buffer = state.buffer
    if buffer.journal_broken or not state.root.stored:
        return
    async with buffer.journal_lock:  # commits land in the order they were asked for
        if buffer.journal_broken:
            return
        earlier, _ = buffer.pending()
        given = [m for m in messages if m.id not in buffer.committed and all(m is not e for e in earlier)]
        new = [*earlier, *given]
        done = [s for s in steps if s.id not in buffer.committed]
        if not new and not done:
            return
        decided = carry.snapshot(state)  # what the run decided so far goes with its steps: a resume needs both
        changed = decided if decided != buffer.carried else None

        async def write() -> None:
            await rt.store.commit_steps(state.identity, state.run, new, done, changed)
            buffer.mark(new, done)  # before a cancel that arrived meanwhile is raised
            buffer.carried = decided

        try:
            await finish_despite_cancel(write())
        except Exception:
            buffer.journal_broken = True
            log.warning("run %s: a step could not be committed; the run's flush writes it", state.run_id,
                        exc_info=True)  # fmt: skip
