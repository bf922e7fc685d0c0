"""One model call: a resolved chain of connectors + a request → typed deltas, with our retry policy.

Retries and fallbacks happen only before the first token. A retryable failure is retried on the
same connector with back-off (bounded by its `timeout_s`), then the next connector of the chain is
tried and a `Fallback` is yielded. After the first token nothing is spliced: the call ends with a
`ModelError(kind="incomplete")` carrying what was shown.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from yao_agent.connectors.classify import FALLBACK
from yao_agent.connectors.deltas import CallEvent, Delta, Fallback
from yao_agent.connectors.providers import engine_for
from yao_agent.connectors.request import ModelRequest
from yao_agent.dsl.specs import ConnectorSpec
from yao_agent.errors import ModelError

Sleep = Callable[[float], Awaitable[None]]
Clock = Callable[[], float]


class Engine(Protocol):
    name: str

    def stream(
        self, connector: ConnectorSpec, request: ModelRequest, environ: Mapping[str, str] | None = None
    ) -> AsyncIterator[Delta]: ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_attempts: int = 3
    base_delay_s: float = 0.5
    max_delay_s: float = 8.0

    def delay(self, attempt: int) -> float:
        return min(self.max_delay_s, self.base_delay_s * 2 ** (attempt - 1))


class Engines:
    """The engines of one runtime. litellm's is created (and imported) only when first needed."""

    def __init__(self, overrides: Mapping[str, Engine] | None = None) -> None:
        self._engines: dict[str, Engine] = dict(overrides or {})

    def get(self, connector: ConnectorSpec) -> Engine:
        name = engine_for(connector)
        engine = self._engines.get(name)
        if engine is None:
            engine = self._engines[name] = _create(name)
        return engine

    async def aclose(self) -> None:
        engines, self._engines = list(self._engines.values()), {}
        for engine in engines:
            await engine.aclose()


def _create(name: str) -> Engine:
    if name == "openai":
        from yao_agent.connectors.openai_engine import OpenAIEngine

        return OpenAIEngine()
    from yao_agent.connectors.litellm_engine import LiteLLMEngine

    return LiteLLMEngine()


async def stream_call(
    chain: Sequence[ConnectorSpec],
    request: ModelRequest,
    *,
    engines: Engines,
    policy: RetryPolicy = RetryPolicy(),
    sleep: Sleep = asyncio.sleep,
    clock: Clock = time.monotonic,
    environ: Mapping[str, str] | None = None,
) -> AsyncIterator[CallEvent]:
    """Stream one model call through the first connector of `chain` that answers."""
    for position, connector in enumerate(chain):
        try:
            async for delta in _with_retries(connector, request, engines, policy, sleep, clock, environ):
                yield delta
            return
        except ModelError as exc:
            if exc.kind not in FALLBACK or position == len(chain) - 1:
                raise
            yield Fallback(connector.id, chain[position + 1].id, exc.message)


async def _with_retries(
    connector: ConnectorSpec,
    request: ModelRequest,
    engines: Engines,
    policy: RetryPolicy,
    sleep: Sleep,
    clock: Clock,
    environ: Mapping[str, str] | None,
) -> AsyncIterator[Delta]:
    engine = engines.get(connector)
    deadline = clock() + connector.timeout_s
    for attempt in range(1, policy.max_attempts + 1):
        try:
            async for delta in engine.stream(connector, request, environ):
                yield delta
            return
        except ModelError as exc:
            delay = policy.delay(attempt)
            if not exc.retryable or attempt == policy.max_attempts or clock() + delay > deadline:
                raise
        await sleep(delay)
