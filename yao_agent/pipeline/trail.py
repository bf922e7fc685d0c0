"""What a model call leaves in its run's record when it does not simply answer (CONTRACT §6 run view,
§8.1 traces, §8.2 usage).

- Each try that failed before any token and that the call went past — retried on the same connector,
  or the chain's next one tried — is an `llm` step of its own, `recovered` (never where a resume
  starts), with the connector, model, error kind and message (free of secrets) and its start and end;
  the next try is a new step with the same input and transition. So the run view, `yao-agent runs` and
  the trace show which links failed, how, and where the time went. Such a try made no reply and is
  billed nothing: its step names the connector in its `error`, never in its `output` (the usage
  ledger's rows are the outputs' connectors).
- A call cut off after the provider began answering (a cancel, a stream that broke) usually never
  gets the provider's usage, which comes with the last chunk; its tokens are then estimated the way the
  context budget counts them — the request it was sent, and what it streamed so far — and priced
  alike, marked `estimated`. Counting nothing would let a cancelled reply's spend vanish from usage,
  budgets and the ledger.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from yao_agent.base.redact import redact
from yao_agent.connectors import FailedTry, ModelRequest, Usage
from yao_agent.connectors.assemble import Assembled
from yao_agent.dsl.specs import ConnectorSpec
from yao_agent.metering.tokens import counter_for
from yao_agent.metering.usage import call_usage
from yao_agent.pipeline.buffer import Buffer
from yao_agent.store.records import StepRecord


def failed_try(buffer: Buffer, step: StepRecord, failed: FailedTry, chain: Sequence[ConnectorSpec]) -> StepRecord:
    """End `step`, the try that failed, as `recovered` with who failed how; begin (and return) the next
    try's step, with the same input and transition."""
    model = next((c.model for c in chain if c.id == failed.connector), None)
    error = {"connector": failed.connector, "model": model, "kind": failed.kind, "message": redact(failed.message)}
    given = step.input
    buffer.end(step, "recovered", error=error)
    step.input = None  # nothing runs it again: the next try's step holds what a resume needs
    following = buffer.begin("llm", given, step.thread_id)
    following.transition = step.transition
    return following


def pending_tries(buffer: Buffer) -> list[StepRecord]:
    """The model calls the run went past that the journal has not committed: they go with the next commit."""
    return [s for s in buffer.steps if s.type == "llm" and s.status == "recovered" and s.id not in buffer.committed]


def cut_usage(
    got: Assembled, request: ModelRequest, answering: ConnectorSpec | None, since: tuple[int, int] = (0, 0)
) -> dict[str, Any] | None:
    """The estimated usage of a call cut off after it began answering, priced as the connector's; None
    when nothing arrived or no connector answered. `got` holds what the reply streamed; `since`, how many
    of its text and reasoning deltas came before this call (a continuation's earlier pieces)."""
    if answering is None:
        return None
    said = "".join([*got.text[since[0] :], *got.reasoning[since[1] :]])
    said += "".join(f"{c.name}{c.arguments}" for c in got.calls.values())
    if not said:
        return None
    counter = counter_for([answering.model])
    sent = counter.request(request.messages, request.tools)
    used = call_usage(Usage.of(sent, counter.text(said)), answering)
    return used | {"estimated": True} if used is not None else None
