"""The `scripted` engine: a `type: scripted` connector's reply, streamed as our typed deltas.

It takes the place of a provider and of the engine that would call it: the rules plan the reply
(`scripted.plan_reply`), and the deltas come out as a real provider's would through either engine —
reasoning, then text, then tool calls whose arguments arrive in fragments, each piece `chunk_size`
characters long with `delay_ms` between pieces, then the finish reason and the usage. A scripted
error, or a conversation no rule fits, is the `ModelError` a provider's failure with that status
gives, so retries and fallbacks treat both alike.

It imports no model SDK: the offline demo and the tests that use it start in the time it takes to
load the app (litellm alone takes seconds to import).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence

from yao_agent.connectors.classify import kind_for_status, model_error
from yao_agent.connectors.deltas import Delta, Embedded, Finish, ReasoningDelta, TextDelta, ToolCallDelta, Usage
from yao_agent.connectors.hashed import hashed_vector, word_count
from yao_agent.connectors.request import ModelRequest
from yao_agent.connectors.scripted import NoRuleMatched, ScriptedReply, pieces, plan_reply
from yao_agent.dsl.specs import ConnectorSpec
from yao_agent.errors import ModelError, RenderError

Sleep = Callable[[float], Awaitable[None]]


def random_call_id() -> str:
    """An id shaped like a provider's: unique, so two identical calls in one chat stay apart."""
    return f"call_{secrets.token_hex(12)}"


class ScriptedEngine:
    name = "scripted"

    def __init__(self, sleep: Sleep = asyncio.sleep, call_id: Callable[[], str] = random_call_id) -> None:
        self._sleep = sleep
        self._call_id = call_id

    async def aclose(self) -> None:
        return None

    async def stream(
        self, connector: ConnectorSpec, request: ModelRequest, environ: Mapping[str, str] | None = None
    ) -> AsyncIterator[Delta]:
        reply = _planned(connector, request)
        delay = connector.delay_ms / 1000
        for number, delta in enumerate(self._pieces(reply, connector.chunk_size)):
            if number:
                # Also when the delay is 0: each piece gives the loop a turn, as a network read would.
                await self._sleep(delay)
            yield delta
        yield Finish("tool_calls" if reply.tool_calls else "stop")
        usage = reply.usage
        yield Usage.of(usage.get("prompt_tokens"), usage.get("completion_tokens"), usage.get("total_tokens"))

    async def embed(
        self, connector: ConnectorSpec, texts: Sequence[str], environ: Mapping[str, str] | None = None
    ) -> Embedded:
        """Hashed bag-of-words vectors (`hashed.py`): deterministic, offline, for tests and demos only."""
        await self._sleep(0)  # a turn for the loop, as a request would give
        tokens = sum(word_count(text) for text in texts)
        return Embedded([hashed_vector(text) for text in texts], connector.model, tokens, connector.id)

    def _pieces(self, reply: ScriptedReply, size: int) -> Iterator[Delta]:
        for text in pieces(reply.reasoning, size):
            yield ReasoningDelta(text)
        for text in pieces(reply.text, size):
            yield TextDelta(text)
        for index, (name, arguments) in enumerate(reply.tool_calls):
            # Like a provider: the first fragment names the call, the others carry only arguments.
            for n, fragment in enumerate(pieces(arguments, size) or [""]):
                first = n == 0
                yield ToolCallDelta(index, self._call_id() if first else None, name if first else None, fragment)


def _planned(connector: ConnectorSpec, request: ModelRequest) -> ScriptedReply:
    """The reply the rules give, or the ModelError a provider answering with that status would cause."""
    try:
        reply = plan_reply(connector, request.messages)
    except (NoRuleMatched, RenderError) as exc:
        raise _failure(connector, 400, str(exc)) from None  # a mistake in the script: the request is refused
    if reply.error_status is not None:
        raise _failure(connector, reply.error_status, reply.error_message)
    return reply


def _failure(connector: ConnectorSpec, status: int, message: str) -> ModelError:
    return model_error(kind_for_status(status, message), connector.id, message, status=status)
