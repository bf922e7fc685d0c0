"""`yao-agent eval replay` (CONTRACT §9.4): stored turns played again on a changed app, tools answered from
the stored runs, each new answer compared with the old one.

Each turn is asked again as its user asked it — the chat as it stood before, then their message — of the
same assistant, as the same user and team, on the app in `--against`. The new runs are stored in a
scratch store of their own (the deployment's store is only read), whose role settings are copied from
the deployment's, so each user's roles pick the connectors they picked. Tools are `ReplayTools`: no MCP
server starts; a call the stored run never made gets no result and makes the turn `unreplayable`.

A turn's verdict: `unchanged` (the same answer and the same tool calls), `changed`, and with a judge
`improved` or `regressed` (pairwise, the two answers shown in a random order), `unreplayable`, or
`failed` (the new run did not complete).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from yao_agent.base.jsonvalue import as_mapping
from yao_agent.errors import YaoAgentError
from yao_agent.evals.expect import Observed
from yao_agent.evals.replay_tools import Recording, canonical_arguments, recording
from yao_agent.evals.run import Runner, observe
from yao_agent.identity import Identity
from yao_agent.messages import ChatMessage, provider_messages, text_of
from yao_agent.pipeline.search import last_user_text
from yao_agent.pipeline.state import RunRequest
from yao_agent.store.replay import StoredTurn

Outcome = Literal["unchanged", "changed", "improved", "regressed", "unreplayable", "failed"]
OUTCOMES: tuple[Outcome, ...] = ("unchanged", "changed", "improved", "regressed", "unreplayable", "failed")


@dataclass(frozen=True, slots=True)
class Preference:
    better: Literal["old", "new", "same"] | None  # None: the judge gave no usable answer
    reason: str
    cost_usd: float | None = None


# Which of two answers to the same question (question, old, new) is better: the pairwise judge.
Compare = Callable[[str, str, str], Awaitable[Preference]]
_PREFERRED: dict[str | None, Outcome] = {"new": "improved", "old": "regressed"}


@dataclass(frozen=True, slots=True)
class Replayed:
    """One stored turn and its replay."""

    run_id: str  # the stored run's
    chat_id: str
    assistant_id: str
    user_id: str
    team_id: str | None
    question: str
    old_answer: str
    old_calls: Sequence[str]
    old_cost_usd: float | None
    old_latency_ms: float | None
    outcome: Outcome
    new: Observed | None  # None: refused before it ran
    why: str  # what was missed, refused, or the judge's reason
    judged: bool = False  # the judge compared the answers (its call is counted with the new runs' cost)
    judge_cost_usd: float | None = None

    @property
    def new_calls(self) -> list[str]:
        return _calls_of(self.new) if self.new is not None else []


async def replay(
    run: Runner, turns: Sequence[StoredTurn], *, compare: Compare | None = None, concurrency: int = 4,
    clock: Callable[[], float] = time.monotonic,
) -> list[Replayed]:  # fmt: skip
    """Every turn replayed through `run` (`concurrency` at once), in the order given."""
    gate = asyncio.Semaphore(concurrency)

    async def one(turn: StoredTurn) -> Replayed:
        async with gate:
            return await replay_turn(run, turn, compare, clock)

    return list(await asyncio.gather(*(one(turn) for turn in turns)))


async def replay_turn(run: Runner, turn: StoredTurn, compare: Compare | None, clock: Callable[[], float]) -> Replayed:
    stored = turn.run
    messages = provider_messages([*turn.before, *_asked(turn)])
    question = last_user_text(messages)
    old_answer = _last_answer(turn)
    old_calls = [f"{c.name}({canonical_arguments(c.arguments)})" for m in turn.turn for c in m.tool_calls]
    base: dict[str, Any] = {
        "run_id": stored.id, "chat_id": stored.chat_id, "assistant_id": stored.assistant_id,
        "user_id": stored.user_id, "team_id": stored.team_id, "question": question, "old_answer": old_answer,
        "old_calls": old_calls, "old_cost_usd": _cost(stored.usage),
        "old_latency_ms": float(stored.duration_ms) if stored.duration_ms is not None else None,
    }  # fmt: skip
    request = RunRequest(stored.assistant_id, Identity(stored.user_id, stored.team_id), messages,
                         metadata={"replay_of": stored.id})  # fmt: skip
    started = clock()
    with recording(Recording.of(turn.turn)) as recorded:
        try:
            result = await run(request)
        except YaoAgentError as exc:  # refused before it ran (the assistant is gone, its access, a budget)
            return Replayed(**base, outcome="failed", new=None, why=f"refused: {exc}")
    seen = observe(result, (clock() - started) * 1000)
    if recorded.missed:
        return Replayed(**base, outcome="unreplayable", new=seen,
                        why="the stored run never called " + ", ".join(recorded.missed))  # fmt: skip
    if seen.status != "completed":
        why = f"it ended {seen.status} ({seen.reason})" + (f": {seen.error}" if seen.error else "")
        return Replayed(**base, outcome="failed", new=seen, why=why)
    if _calls_of(seen) == old_calls and _plain(seen.answer) == _plain(old_answer):
        return Replayed(**base, outcome="unchanged", new=seen, why="")
    if compare is None:
        return Replayed(**base, outcome="changed", new=seen, why="")
    preferred = await compare(question, old_answer, seen.answer)
    return Replayed(**base, outcome=_PREFERRED.get(preferred.better, "changed"), new=seen, why=preferred.reason,
                    judged=True, judge_cost_usd=preferred.cost_usd)  # fmt: skip


def _asked(turn: StoredTurn) -> list[ChatMessage]:
    """What the turn was asked with: the run's messages before its first reply (the user's)."""
    asked: list[ChatMessage] = []
    for message in turn.turn:
        if message.role in ("assistant", "tool"):
            break
        asked.append(message)
    return asked


def _last_answer(turn: StoredTurn) -> str:
    texts = (text_of(m.content) for m in reversed(turn.turn) if m.role == "assistant" and not m.hidden)
    return next((t for t in texts if t), "")


def _calls_of(seen: Observed) -> list[str]:
    return [f"{c.name}({_arguments(c.arguments)})" for c in seen.tool_calls]


def _arguments(parsed: Any) -> str:
    """A call's arguments as `old_calls` writes them: JSON with sorted keys, or the text that was no JSON."""
    return parsed if isinstance(parsed, str) else json.dumps(parsed, sort_keys=True, ensure_ascii=False)


def _cost(usage: Any) -> float | None:
    cost = as_mapping(usage).get("cost_usd")
    return float(cost) if isinstance(cost, (int, float)) else None


def _plain(text: str) -> str:
    return " ".join(text.split())
