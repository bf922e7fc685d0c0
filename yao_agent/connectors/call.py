"""One model call: a resolved chain of connectors + a request → typed deltas, with our retry policy.

Retries and fallbacks happen only before the first token. A retryable failure is retried on the
same connector with back-off (bounded by its `timeout_s`), then the next connector of the chain is
tried and a `Fallback` is yielded; each try that failed and was gone past is a `FailedTry` first.
After the first token nothing is spliced: the call ends with a `ModelError(kind="incomplete")`
carrying what was shown.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from yao_agent.connectors.capabilities import refusal
from yao_agent.connectors.classify import FALLBACK, RETRYABLE
from yao_agent.connectors.cooldown import Cooldowns
from yao_agent.connectors.deltas import CallEvent, Delta, Embedded, FailedTry, Fallback
from yao_agent.connectors.providers import engine_for, resolve_endpoint
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

    async def embed(
        self, connector: ConnectorSpec, texts: Sequence[str], environ: Mapping[str, str] | None = None
    ) -> Embedded:
        """One vector per text, in one request (the caller keeps batches small: `embedding.embed`)."""
        ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_attempts: int = 3
    base_delay_s: float = 0.5
    max_delay_s: float = 8.0

    def delay(self, attempt: int) -> float:
        return min(self.max_delay_s, self.base_delay_s * 2 ** (attempt - 1))


class Engines:
    """The engines of one runtime, each created (and its SDK imported) only when a connector first needs
    it: litellm takes seconds to import, the `openai` SDK most of a second, the scripted engine nothing."""

    def __init__(self, overrides: Mapping[str, Engine] | None = None) -> None:
        self._engines: dict[str, Engine] = dict(overrides or {})

    def get(self, connector: ConnectorSpec) -> Engine:
        name = engine_for(connector)
        engine = self._engines.get(name)
        if engine is None:
            engine = self._engines[name] = _create(name, connector)
        return engine

    async def aclose(self) -> None:
        engines, self._engines = list(self._engines.values()), {}
        for engine in engines:
            await engine.aclose()


def _create(name: str, connector: ConnectorSpec) -> Engine:
    if name == "scripted":
        from yao_agent.connectors.scripted_engine import ScriptedEngine

        return ScriptedEngine()
    if name == "local":
        from yao_agent.connectors.local_engine import LocalEngine

        return LocalEngine()
    if name == "openai":
        from yao_agent.connectors.tls import on_thread

        # Over https the CA bundle loads (outside the GIL) while the engine is imported; a connector
        # over plain http may well never need it (the engine then makes it when one does).
        plain = connector.base_url is not None and connector.base_url.raw.startswith("http://")
        tls = None if plain else on_thread()
        from yao_agent.connectors.openai_engine import OpenAIEngine

        return OpenAIEngine(tls)
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
    cooldowns: Cooldowns | None = None,
) -> AsyncIterator[CallEvent]:
    """Stream one model call through the first connector of `chain` that answers.

    With `cooldowns` (the runtime's), links that failed lately are skipped, each with a `Fallback` that
    says so, unless every link is cooling down."""
    cooldowns = cooldowns if cooldowns is not None else Cooldowns(clock)
    able = [c for c in chain if refusal(c, request) is None]
    if not able:
        raise ModelError(str(refusal(chain[0], request)), kind="bad_request", connector=chain[0].id)
    links = cooldowns.usable(able) if len(able) > 1 else able
    passed = 0  # how much of the chain is behind us
    for position, connector in enumerate(links):
        here = chain.index(connector)
        for skipped in chain[passed:here]:  # said, so a chain never changes hands silently
            why = refusal(skipped, request) or f"it failed lately ({cooldowns.remaining(skipped):.0f} s more)"
            yield Fallback(skipped.id, connector.id, f"skipped: {why}")
        passed = here + 1
        try:
            async for delta in _with_retries(connector, request, engines, policy, sleep, clock, environ):
                yield delta
            cooldowns.succeeded(connector)
            return
        except ModelError as exc:
            if exc.kind in RETRYABLE:
                cooldowns.failed(connector)
            if exc.kind not in FALLBACK or position == len(links) - 1:
                raise
            failed = exc
        yield FailedTry(connector.id, failed.kind, failed.message)
        yield Fallback(connector.id, links[position + 1].id, failed.message)


async def _with_retries(
    connector: ConnectorSpec,
    request: ModelRequest,
    engines: Engines,
    policy: RetryPolicy,
    sleep: Sleep,
    clock: Clock,
    environ: Mapping[str, str] | None,
) -> AsyncIterator[Delta | FailedTry]:
    resolve_endpoint(connector, environ)  # a key that is not set fails here, before its engine's SDK is imported
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
            failed = exc
        yield FailedTry(connector.id, failed.kind, failed.message)
        await sleep(delay)
