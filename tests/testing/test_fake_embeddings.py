"""The fake provider's `/v1/embeddings`, as the official SDK reads it, and the in-process doubles' embed."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.support.connectors import fake_connector
from yao_agent.connectors.embedding import embed
from yao_agent.connectors.hashed import hashed_vector
from yao_agent.errors import ModelError
from yao_agent.testing import FakeProvider, Reply, ScriptedModel


async def test_the_sdk_gets_hashed_vectors_of_the_length_it_asks(provider: FakeProvider) -> None:
    """The SDK asks for base64 unless told otherwise: both encodings carry the same vectors."""
    client = openai.AsyncOpenAI(api_key="sk-test", base_url=provider.base_url, max_retries=0)
    try:
        packed = await client.embeddings.create(model="small", input=["refund policy", "travel"], dimensions=8)
        plain = await client.embeddings.create(model="small", input="refund policy", encoding_format="float")
    finally:
        await client.close()
    [first, second] = packed.data
    assert first.embedding == pytest.approx(hashed_vector("refund policy", 8))  # (float32 on the wire)
    assert second.embedding == pytest.approx(hashed_vector("travel", 8))
    assert (packed.model, packed.usage.prompt_tokens) == ("small", 3)
    assert plain.data[0].embedding == hashed_vector("refund policy")
    assert [r.body["input"] for r in provider.requests] == [["refund policy", "travel"], "refund policy"]


async def test_an_error_scenario_fails_the_request_as_for_a_chat(provider: FakeProvider) -> None:
    async with httpx.AsyncClient(base_url=provider.base_url) as client:
        by_model = await client.post("/embeddings", json={"model": "e429", "input": ["x"]})
        by_header = await client.post(
            "/embeddings", json={"model": "m", "input": ["x"]}, headers={"X-Fake-Scenario": "e500"}
        )
        provider.enqueue(Reply(status=401, error_message="no such key"), model="m")  # its model's queue only
        queued = await client.post("/embeddings", json={"model": "m", "input": ["x"]})
        wrong = await client.post("/embeddings", json={"model": "m", "input": [1, 2]})
    assert (by_model.status_code, by_model.headers["retry-after"]) == (429, "1")
    assert by_header.status_code == 500
    assert (queued.status_code, queued.json()["error"]["message"]) == (401, "no such key")
    assert (wrong.status_code, wrong.json()["error"]["message"]) == (
        400,
        "'input' must be a string or a non-empty list of strings",
    )


async def test_the_in_process_double_embeds_as_the_fake_provider_does() -> None:
    model = ScriptedModel()
    model.enqueue(Reply(), Reply(status=500), model="small")
    engines = model.engines()
    connector = fake_connector(model.base_url, model="small")
    got = await embed(engines, [connector], ["refund policy"])
    assert (got.vectors, got.model, got.input_tokens) == ([hashed_vector("refund policy")], "small", 2)
    with pytest.raises(ModelError) as caught:
        await embed(engines, [connector], ["again"])
    assert caught.value.kind == "server"
    assert [(r.path, r.body["input"], r.connector) for r in model.requests] == [
        ("/embeddings", ["refund policy"], "fake.model"),
        ("/embeddings", ["again"], "fake.model"),
    ]
