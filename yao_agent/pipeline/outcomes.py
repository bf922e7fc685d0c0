"""What each step of the turn loop (pipeline/turns.py) leads to, typed: one more model turn and why
(`Continue`, its transition stored on the `llm` step), a hand-over to another assistant (`HandOver`),
the run's end (`Finish`), or a stop until a person decides on tool calls (`Wait`).

`Finish` and `Wait` end the loop; a child run's end is its parent's to act on (a child that waits
stops its parent too, which ends `waiting`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from yao_agent.messages import ChatMessage, ToolCall
from yao_agent.pipeline.answers import Delegation
from yao_agent.store.records import Approval
from yao_agent.vocabulary import Transition


@dataclass(frozen=True, slots=True)
class Continue:
    """One more model turn, and why; `extra` is said to the model for this turn only. `continues`: a
    resume's turn that goes on from this cut reply (`extra` ends with it and the request to go on:
    pipeline/cut.py)."""

    transition: Transition
    extra: tuple[dict[str, Any], ...] = ()
    with_tools: bool = True
    continues: ChatMessage | None = None


@dataclass(frozen=True, slots=True)
class HandOver:
    """Another assistant takes the turn (a hook's `delegate`); its reply is the turn's reply."""

    target: Delegation


@dataclass(frozen=True, slots=True)
class Finish:
    """The run is done: its last reply stands."""


@dataclass(frozen=True, slots=True)
class Wait:
    """Tool calls of a reply wait for a person (approvals), or for the client to run them (`client`).
    For a person, none of the reply's calls ran, its round is
    recorded as a `waiting` step, and the run ends `waiting` — not a failure: a decision continues it."""

    approvals: tuple[Approval, ...]
    client: tuple[ToolCall, ...] = ()  # or the calls of the client's own tools, which the client runs (§9.2)


Outcome = Continue | HandOver | Finish | Wait
End = Finish | Wait  # how the loop ends
