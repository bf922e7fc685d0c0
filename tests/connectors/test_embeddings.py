"""Embeddings through connectors: the provider engines over real loopback HTTP, the scripted engine's
hashed vectors, the local engine's shipped WordLlama weights, and a chain that falls back."""

from __future__ import annotations

import json
import logging
import math
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import cast

import numpy as np
import pytest

from tests.support.apps import errors, make_app
from tests.support.connectors import ENGINES, EngineName, drain, fake_connector
from yao_agent.connectors import Engines, Fallback, ModelRequest, TextDelta
from yao_agent.connectors.embedding import BATCH, embed
from yao_agent.connectors.hashed import hashed_vector
from yao_agent.connectors.local_engine import FILES, load_model, package_folder
from yao_agent.dsl import load_app
from yao_agent.dsl.specs import ConnectorSpec, ScriptRule
from yao_agent.errors import ModelError
from yao_agent.testing import FakeProvider, Reply

REPO = Path(__file__).resolve().parents[2]
LOCAL = ConnectorSpec(id="emb.local", type="local", file="connectors/emb/local.yml", model="wordllama-256")
SCRIPTED = ConnectorSpec(
    id="demo.echo", type="scripted", file="connectors/demo/echo.yml", model="scripted",
    rules=(ScriptRule(line=1, reply="echo: {{ last_user }}"),),
)  # fmt: skip


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def length(vector: Sequence[float]) -> float:
    return math.sqrt(sum(x * x for x in vector))


@pytest.fixture
async def engines() -> Engines:
    return Engines()


# -- the provider engines, over HTTP -------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_provider_embeds_texts_in_order_with_its_usage(provider: FakeProvider, engine: EngineName) -> None:
    engines = Engines()
    connector = fake_connector(provider.base_url, engine=engine, model="text-embedding-3-small")
    try:
        got = await embed(engines, [connector], ["refund policy", "travel expenses", "refund rules"])
    finally:
        await engines.aclose()
    assert got.vectors == [hashed_vector(t) for t in ("refund policy", "travel expenses", "refund rules")]
    assert (got.model, got.input_tokens, got.connector) == ("text-embedding-3-small", 6, "fake.model")
    [request] = provider.requests
    assert (request.path, request.body["input"]) == (
        "/v1/embeddings",
        ["refund policy", "travel expenses", "refund rules"],
    )
    assert request.headers["authorization"] == "Bearer sk-test-key-0123456789"


@pytest.mark.parametrize("engine", ENGINES)
async def test_many_texts_go_in_batches_of_128(provider: FakeProvider, engine: EngineName) -> None:
    texts = [f"note number {n}" for n in range(2 * BATCH + 44)]
    engines = Engines()
    try:
        got = await embed(engines, [fake_connector(provider.base_url, engine=engine)], texts)
    finally:
        await engines.aclose()
    assert [len(r.body["input"]) for r in provider.requests] == [128, 128, 44]
    assert got.vectors == [hashed_vector(t) for t in texts]
    assert got.input_tokens == 3 * len(texts)


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_refused_key_is_an_auth_error_that_never_shows_the_key(
    provider: FakeProvider, engine: EngineName
) -> None:
    key = "sk-live-secret-0123456789abcdef"
    provider.enqueue(
        Reply(status=401, error_message=f"Incorrect API key provided: {key}", error_code="invalid_api_key"),
        model="text",
    )
    second = fake_connector(provider.base_url, engine=engine, connector_id="fake.second")
    engines = Engines()
    try:
        with pytest.raises(ModelError) as caught:
            await embed(engines, [fake_connector(provider.base_url, engine=engine, api_key=key), second], ["hi"])
    finally:
        await engines.aclose()
    error = caught.value
    assert (error.kind, error.status, error.connector) == ("auth", 401, "fake.model")
    assert "Incorrect API key provided" in error.message and key not in error.message
    assert len(provider.requests) == 1  # a refused key is not the next connector's business


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_provider_error_falls_back_to_the_next_connector(provider: FakeProvider, engine: EngineName) -> None:
    failing = fake_connector(provider.base_url, engine=engine, model="e500", connector_id="fake.down")
    working = fake_connector(provider.base_url, engine=engine, model="small", connector_id="fake.up")
    engines = Engines()
    try:
        got = await embed(engines, [failing, working], ["hello"])
    finally:
        await engines.aclose()
    assert (got.connector, got.model, got.vectors) == ("fake.up", "small", [hashed_vector("hello")])
    assert [r.model for r in provider.requests] == ["e500", "small"]


async def test_a_connector_that_fails_midway_is_left_whole(provider: FakeProvider) -> None:
    """Vectors of two models cannot be compared: the next connector embeds every text again."""
    provider.enqueue(Reply(), Reply(status=503), model="first")
    chain = [
        fake_connector(provider.base_url, model="first", connector_id="fake.first"),
        fake_connector(provider.base_url, model="second", connector_id="fake.second"),
    ]
    texts = [f"text {n}" for n in range(BATCH + 1)]
    engines = Engines()
    try:
        got = await embed(engines, chain, texts)
    finally:
        await engines.aclose()
    assert got.connector == "fake.second" and len(got.vectors) == len(texts)
    assert [(r.model, len(r.body["input"])) for r in provider.requests] == [
        ("first", 128), ("first", 1), ("second", 128), ("second", 1)
    ]  # fmt: skip


async def test_when_every_connector_fails_the_error_says_how_each_did(provider: FakeProvider) -> None:
    chain = [
        fake_connector(provider.base_url, model="e500", connector_id="fake.one"),
        fake_connector(provider.base_url, model="e429", connector_id="fake.two"),
    ]
    engines = Engines()
    try:
        with pytest.raises(ModelError) as caught:
            await embed(engines, chain, ["hello"])
    finally:
        await engines.aclose()
    assert caught.value.kind == "rate_limit"
    assert caught.value.message.startswith("every embedding connector failed: model call to fake.one failed")
    assert "fake e500" in caught.value.message and "fake e429" in caught.value.message


async def test_no_texts_make_no_request(provider: FakeProvider, engines: Engines) -> None:
    got = await embed(engines, [fake_connector(provider.base_url)], [])
    assert (got.vectors, got.input_tokens, got.connector) == ([], 0, "fake.model")
    assert provider.requests == []


# -- the scripted engine's hashed vectors ------------------------------------------------------------------------


async def test_a_scripted_connector_embeds_with_hashed_vectors(engines: Engines) -> None:
    texts = ["The refund policy for travel", "refund policy", "quarterly tax filing deadlines", ""]
    got = await embed(engines, [SCRIPTED], texts)
    assert got.vectors == [hashed_vector(t) for t in texts]
    assert (got.model, got.input_tokens, got.connector) == ("scripted", 11, "demo.echo")
    near, far = cosine(got.vectors[0], got.vectors[1]), cosine(got.vectors[0], got.vectors[2])
    assert near > 0.5 > abs(far)
    assert [round(length(v), 6) for v in got.vectors] == [1.0, 1.0, 1.0, 0.0]
    assert hashed_vector("Refund, POLICY!", dims=16) == hashed_vector("refund policy", dims=16)


# -- the local engine ----------------------------------------------------------------------------------------------


async def test_a_local_connector_embeds_with_wordllama_offline(engines: Engines) -> None:
    texts = [
        "The cat sat on the mat.",
        "A cat was sitting on a rug.",
        "Quarterly tax filing deadlines for corporations.",
    ]
    got = await embed(engines, [LOCAL], [*texts, ""])
    assert (got.model, got.connector) == ("wordllama-256", "emb.local")
    assert [len(v) for v in got.vectors] == [256] * 4
    cat, sitting, taxes, empty = got.vectors
    assert cosine(cat, sitting) > 0.5 > cosine(cat, taxes) + 0.3
    assert [round(length(v), 5) for v in (cat, sitting, taxes)] == [1.0] * 3 and not any(empty)
    assert got.input_tokens > len(" ".join(texts).split())  # word pieces


async def test_the_local_vectors_are_wordllamas_own() -> None:
    """The table and tokenizer read here pool as WordLlama's own inference does (mean, L2-normalised)."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        from wordllama.inference import WordLlamaInference  # it configures the root logger: undone below
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    folder = package_folder()
    ours = load_model("wordllama-256", folder)
    weights, tokenizer = FILES["wordllama-256"]
    from safetensors.numpy import load_file  # pyright: ignore[reportUnknownVariableType]
    from tokenizers import Tokenizer

    table = load_file(str(folder / weights))["embedding.weight"]
    theirs = WordLlamaInference(table, Tokenizer.from_file(str(folder / tokenizer)))
    texts = ["Refunds are paid within 30 days.", "Le chat dort.", "a " * 300]
    pooled = np.asarray(theirs.embed(texts, norm=True))  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
    expected = cast(list[list[float]], pooled.tolist())
    vectors, _ = ours.embed(texts)
    assert all(
        math.isclose(x, y, abs_tol=1e-5)
        for got, want in zip(vectors, expected, strict=True)
        for x, y in zip(got, want, strict=True)
    )


NO_NETWORK = """
import asyncio, json, socket, sys

def refuse(*args, **kwargs):
    raise OSError("no network in this test")

socket.socket.connect = refuse
socket.create_connection = refuse
from yao_agent.connectors.local_engine import LocalEngine
from yao_agent.dsl.specs import ConnectorSpec

connector = ConnectorSpec(id="emb.local", type="local", file="x.yml", model="wordllama-256")
answer = asyncio.run(LocalEngine().embed(connector, ["hello world"]))
imported = sorted(m for m in sys.modules if m.startswith(("wordllama", "requests")))
print(json.dumps({"dims": len(answer.vectors[0]), "imported": imported}))
"""


def test_the_local_model_loads_with_no_network_and_no_cache(tmp_path: Path) -> None:
    """Nothing is downloaded, nor looked for in a cache: the wheel's own files are all it reads."""
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "XDG_CACHE_HOME": str(tmp_path / "cache")}
    done = subprocess.run(
        [sys.executable, "-c", NO_NETWORK], capture_output=True, text=True, cwd=REPO, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"dims": 256, "imported": []}
    assert not (tmp_path / ".cache").exists() and not (tmp_path / "cache").exists()


async def test_a_local_connector_names_only_its_own_model(engines: Engines) -> None:
    other = ConnectorSpec(id="emb.other", type="local", file="connectors/emb/other.yml", model="minilm")
    with pytest.raises(
        ModelError,
        match=r"emb\.other failed: not configured: no local model 'minilm' \(expected one of: wordllama-256\)",
    ):
        await embed(engines, [other], ["hi"])


async def test_a_local_connector_cannot_chat_and_a_chain_passes_it_by(engines: Engines) -> None:
    with pytest.raises(ModelError, match="only serves embeddings") as caught:
        await drain([LOCAL], engines=engines)
    assert caught.value.kind == "bad_request"
    events = await drain([LOCAL, SCRIPTED], engines=engines)
    assert isinstance(events[0], Fallback) and events[0].reason.startswith("skipped: connector emb.local only serves")
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "echo: hi"
    request = ModelRequest(messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(ModelError, match="cannot answer a chat"):  # the engine itself, called past the chain
        async for _ in engines.get(LOCAL).stream(LOCAL, request):
            pass


# -- the app's files -------------------------------------------------------------------------------------------------


def test_a_local_connector_validates_with_its_default_model(tmp_path: Path) -> None:
    make_app(tmp_path, {
        "connectors/emb/local.yml": "type: local\n",
        "app.yml": "roles:\n  default: demo.echo\n  embedding: [emb.local]\n",
    })  # fmt: skip
    assert errors(tmp_path) == []
    assert load_app(tmp_path).connectors["emb.local"].model == "wordllama-256"


def test_a_local_connector_is_refused_where_a_chat_is_answered(tmp_path: Path) -> None:
    make_app(tmp_path, {
        "connectors/emb/local.yml": "type: local\nmodel: minilm\nbase_url: http://127.0.0.1:9/v1\n",
        "app.yml": "roles:\n  default: [demo.echo, emb.local]\n  embedding: emb.local\n",
        "assistants/chat/assistant.yml": (
            "name: Chat\nconnector: emb.local\ncontext: {summarize_with: 'use::embedding'}\n"
        ),
    })  # fmt: skip
    assert errors(tmp_path) == [
        "app.yml:2 roles.default[1]: connector 'emb.local' is type: local and only serves embeddings, while role "
        "'default' answers chats (expected a connector that can chat)",
        "assistants/chat/assistant.yml:2 connector: connector 'emb.local' is type: local and only serves "
        "embeddings (expected a connector that can chat)",
        "assistants/chat/assistant.yml:3 context.summarize_with: role 'embedding' names connector 'emb.local', "
        "which is type: local and only serves embeddings (expected a connector that can chat)",
        "connectors/emb/local.yml:2 model: 'minilm' is no local model (expected wordllama-256, or no model)",
        "connectors/emb/local.yml:3 base_url: 'base_url' does not apply to type: local (it embeds in this process, "
        "calling no provider)",
    ]
