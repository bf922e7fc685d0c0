"""A resume goes on from a reply that broke off: the cut text is continued, not asked for again.

When a model call breaks off after some of its text was shown (a cancel, a client that hung up, a
provider error mid-stream, the run's timeout), that text is stored as an incomplete message and the
call's `llm` step names it (`fragment`: pipeline/llm.py). A resume of the run makes that call again
the way a reply cut by the output limit is continued (CONTRACT §4.7): the request ends with the cut
text as an assistant message and a user message asking the model to go on exactly where it stopped
(`RESUME_PROMPT`). What it writes streams as a new message whose `message_start` names the one it
`continues`, its deltas carrying only the new text (the client shows the cut text already); it is
stored as one completed message with the cut text and what followed, and `continues` set. The cut
message stays stored and, being incomplete, is never sent to a model again: the chat's history holds
the text once. A continuation cut in turn is continued from the whole text so far.

The call is made again whole, as before, when there is nothing to continue: no text (or only
whitespace), a tool call begun (a call cannot be continued), or a message stored after the cut one (the
person said more meanwhile: the model answers that rather than finish a sentence from before).
"""

from __future__ import annotations

from dataclasses import replace

from yao_agent.base.jsonvalue import as_mapping
from yao_agent.messages import ChatMessage
from yao_agent.pipeline.llm import RESUME_PROMPT
from yao_agent.pipeline.outcomes import Continue
from yao_agent.pipeline.state import RunState
from yao_agent.store.records import StepRecord


def go_on(state: RunState, step: StepRecord | None, how: Continue) -> Continue:
    """The resumed model call `how` (for `step`, the call that broke off), continuing its cut reply if
    there is one to continue."""
    cut = fragment(state, step)
    if cut is None:
        return how
    said = ({"role": "assistant", "content": cut.content}, {"role": "user", "content": RESUME_PROMPT})
    return replace(how, extra=(*how.extra, *said), continues=cut)


def fragment(state: RunState, step: StepRecord | None) -> ChatMessage | None:
    """The cut reply the step names, if it is still the last message of the run's thread and has text."""
    if step is None or step.type != "llm":
        return None
    named = as_mapping(step.output).get("fragment")
    if not isinstance(named, str):
        return None
    thread = [m for m in state.root.history if m.thread_id == state.thread_id and not m.withheld]
    last = thread[-1] if thread else None
    if last is None or (last.id, last.role, last.status) != (named, "assistant", "incomplete"):
        return None
    return last if isinstance(last.content, str) and last.content.strip() else None
