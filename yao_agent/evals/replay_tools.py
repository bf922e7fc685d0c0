"""The tools of a replay: offered as each MCP server offered them when last listed (the store keeps it),
answered with what the stored run got back. No server is started and no tool runs.

One `ReplayTools` serves every replayed turn of a replay at once; which turn a call belongs to is the
`Recording` the turn's task set (`recording`), so concurrent turns never answer from each other's runs.
"""

from __future__ import annotations

import contextlib
import json
from collections import deque
from collections.abc import Generator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from yao_agent.dsl.specs import McpServerSpec, McpUse
from yao_agent.errors import ToolError
from yao_agent.messages import ChatMessage, text_of
from yao_agent.tools import Offer, ToolOutcome, ToolSpec, catalog
from yao_agent.tools.outcome import failure

NOT_RECORDED = (
    "this call was not made by the stored run, so a replay has no result for it (tools never run in a replay)"
)


@dataclass(slots=True)
class Recording:
    """A stored turn's calls and their results, as a replay of it asks for them; and what it asked for that
    the stored run never did (`missed`: the replay is then `unreplayable`)."""

    results: dict[tuple[str, str], deque[str]] = field(default_factory=dict[tuple[str, str], deque[str]])
    missed: list[str] = field(default_factory=list[str])
    served: int = 0

    @classmethod
    def of(cls, turn: Sequence[ChatMessage]) -> Recording:
        answers = {m.tool_call_id: text_of(m.content) for m in turn if m.role == "tool" and m.tool_call_id}
        recording = cls()
        for message in turn:
            for call in message.tool_calls:
                if call.id in answers:
                    key = (call.name, canonical_arguments(call.arguments))
                    recording.results.setdefault(key, deque()).append(answers[call.id])
        return recording

    def answer(self, name: str, arguments: str) -> str | None:
        """The stored result of this call (the same call made again gets the next one, then the last)."""
        found = self.results.get((name, canonical_arguments(arguments)))
        if not found:
            self.missed.append(f"{name}({arguments})")
            return None
        self.served += 1
        return found.popleft() if len(found) > 1 else found[0]


_RECORDING: ContextVar[Recording | None] = ContextVar("yao_agent_replay_recording", default=None)


@contextlib.contextmanager
def recording(recorded: Recording) -> Generator[Recording]:
    """While a turn is replayed (in this task and those it starts), its calls are answered from `recorded`."""
    token = _RECORDING.set(recorded)
    try:
        yield recorded
    finally:
        _RECORDING.reset(token)


class ReplayTools:
    """`Tools` for a replay: the app's servers as last listed, stored results for the calls."""

    def __init__(self, servers: Mapping[str, McpServerSpec], listed: Mapping[str, Sequence[Mapping[str, Any]]]) -> None:
        self._servers = dict(servers)
        self._listed = {sid: catalog.from_stored(spec, listed[sid]) for sid, spec in servers.items() if sid in listed}
        self._warned: set[tuple[str, str]] = set()

    async def offer(self, uses: Sequence[McpUse]) -> Offer:
        offered: dict[str, ToolSpec] = {}
        unavailable: dict[str, str] = {}
        for use in uses:
            server = self._servers.get(use.server)
            if server is None:
                known = ", ".join(sorted(self._servers)) or "none"
                raise ToolError(f"unknown MCP server '{use.server}' (known: {known})")
            listed = self._listed.get(use.server)
            if listed is None:
                unavailable[use.server] = (f"MCP server '{use.server}' was never listed in this store, so a replay "
                                           "cannot offer its tools")  # fmt: skip
                continue
            for spec in catalog.select(server, listed, use.tools, self._warned):
                offered.setdefault(spec.name, spec)
        return Offer(list(offered.values()), unavailable)

    def find(self, name: str, offered: Sequence[ToolSpec]) -> ToolSpec | None:
        return catalog.find(name, offered)

    def locate(self, name: str) -> ToolSpec | None:
        return next((s for specs in self._listed.values() if (s := catalog.find(name, specs)) is not None), None)

    def server_of(self, tool_name: str) -> str | None:
        prefix = tool_name.partition(catalog.SEPARATOR)[0]
        return next((spec.id for spec in self._servers.values() if spec.tool_prefix == prefix), None)

    async def call(self, spec: ToolSpec, arguments: str) -> ToolOutcome:
        recorded = _RECORDING.get()
        answer = recorded.answer(spec.name, arguments) if recorded is not None else None
        if answer is None:
            return failure(NOT_RECORDED, retryable=False)
        return ToolOutcome(result=answer, error=None, retryable=False)

    def warm(self, uses: Sequence[McpUse]) -> None:
        return None  # nothing starts in a replay

    async def aclose(self) -> None:
        return None


def canonical_arguments(arguments: str) -> str:
    """Arguments compared by value: the same JSON object written with other spacing or key order is the
    same call."""
    try:
        return json.dumps(json.loads(arguments), sort_keys=True, ensure_ascii=False)
    except ValueError:
        return arguments
