"""Texts to vectors through a chain of connectors: the first that answers serves them all.

Texts go in batches of at most `BATCH` per request. Every vector of one call comes from one connector:
vectors of two models cannot be compared, so a connector that fails on any batch is left whole and the
next one of the chain starts again from the first batch. Which failures move on are those that move a
chat on (`classify.FALLBACK`: rate limits, provider errors, timeouts, lost connections, a key not set);
any other (a refused key, a rejected request) fails the call at once, as it would fail on retry.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from yao_agent.connectors.call import Engines
from yao_agent.connectors.classify import FALLBACK, model_error
from yao_agent.connectors.deltas import Embedded
from yao_agent.connectors.providers import resolve_endpoint
from yao_agent.dsl.specs import ConnectorSpec
from yao_agent.errors import ModelError

BATCH = 128  # texts per request: within every provider's limit (OpenAI's is 2048) and a short wait each


async def embed(
    engines: Engines,
    chain: Sequence[ConnectorSpec],
    texts: Sequence[str],
    environ: Mapping[str, str] | None = None,
) -> Embedded:
    """One unit of meaning per text, in order, from the first connector of `chain` that serves them all.

    No texts: no request, and an empty answer naming the chain's first connector. ModelError when every
    connector failed (its message says how each did) or one failed in a way another would not mend."""
    if not chain:
        raise ModelError("no connector to embed with (expected a connector or a role naming one)", kind="config")
    if not texts:
        return Embedded([], chain[0].model, 0, chain[0].id)
    failures: list[ModelError] = []
    for connector in chain:
        try:
            return await _embed_with(engines, connector, texts, environ)
        except ModelError as exc:
            if exc.kind not in FALLBACK:
                raise
            failures.append(exc)
    raise _every_one_failed(failures)


async def _embed_with(
    engines: Engines, connector: ConnectorSpec, texts: Sequence[str], environ: Mapping[str, str] | None
) -> Embedded:
    resolve_endpoint(connector, environ)  # a key that is not set fails here, before its engine's SDK is imported
    engine = engines.get(connector)
    vectors: list[list[float]] = []
    tokens = 0
    model = connector.model
    for start in range(0, len(texts), BATCH):
        batch = texts[start : start + BATCH]
        answer = await engine.embed(connector, batch, environ)
        if len(answer.vectors) != len(batch):
            said = f"{len(answer.vectors)} vectors for {len(batch)} texts"
            raise model_error("server", connector.id, f"the answer had {said}")
        vectors += answer.vectors
        tokens += answer.input_tokens
        model = answer.model if start == 0 else model
    return Embedded(vectors, model, tokens, connector.id)


def _every_one_failed(failures: list[ModelError]) -> ModelError:
    last = failures[-1]
    if len(failures) == 1:
        return last
    said = "; ".join(failure.message for failure in failures)
    return ModelError(
        f"every embedding connector failed: {said}",
        kind=last.kind,
        retryable=last.retryable,
        status=last.status,
        connector=last.connector,
    )
