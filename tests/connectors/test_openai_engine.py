"""The `openai` engine's clients: one TLS context for all of them, made once, off the event loop, when
an https endpoint needs it."""

from __future__ import annotations

import ssl
import threading

import pytest

from tests.support.connectors import assemble, drain, fake_connector
from yao_agent.connectors import Engines
from yao_agent.connectors.openai_engine import OpenAIEngine
from yao_agent.connectors.tls import default_tls, on_thread
from yao_agent.errors import ModelError
from yao_agent.testing import FakeProvider, Reply


async def test_every_client_shares_one_tls_context_made_on_a_thread(provider: FakeProvider) -> None:
    made: list[str] = []

    def tls() -> ssl.SSLContext:
        made.append(threading.current_thread().name)
        return ssl.create_default_context()

    engines = Engines({"openai": OpenAIEngine(on_thread(tls))})
    provider.enqueue(Reply(text="one"), Reply(text="two"))
    try:
        for key in ("sk-first-key-0123456789", "sk-other-key-0123456789"):  # two endpoints, two clients
            events = await drain([fake_connector(provider.base_url, api_key=key)], engines=engines)
            assert assemble(events).content in ("one", "two")
    finally:
        await engines.aclose()
    assert made == ["yao-openai-tls"]
    assert [r.headers.get("authorization") for r in provider.requests] == [
        "Bearer sk-first-key-0123456789",
        "Bearer sk-other-key-0123456789",
    ]


async def test_a_failure_to_make_the_tls_context_reaches_a_call_over_https() -> None:
    def broken() -> ssl.SSLContext:
        raise ssl.SSLError("no CA bundle here")

    engines = Engines({"openai": OpenAIEngine(on_thread(broken))})
    try:
        with pytest.raises(ssl.SSLError, match="no CA bundle here"):
            await drain([fake_connector("https://127.0.0.1:9/v1")], engines=engines)
    finally:
        await engines.aclose()


async def test_a_call_over_plain_http_needs_no_tls_context(provider: FakeProvider) -> None:
    def broken() -> ssl.SSLContext:
        raise ssl.SSLError("no CA bundle here")

    engines = Engines({"openai": OpenAIEngine(on_thread(broken))})
    provider.enqueue(Reply(text="plain"))
    try:
        assert assemble(await drain([fake_connector(provider.base_url)], engines=engines)).content == "plain"
    finally:
        await engines.aclose()


async def test_the_engine_makes_the_context_when_an_https_endpoint_first_needs_it() -> None:
    engine = OpenAIEngine()
    try:
        assert engine.wire._tls is None  # pyright: ignore[reportPrivateUsage]
        with pytest.raises(ModelError):  # nothing listens there: the context was made, the connection failed
            await drain([fake_connector("https://127.0.0.1:9/v1")], engines=Engines({"openai": engine}))
        context = await engine.wire.context()
        assert context.verify_mode == ssl.CERT_REQUIRED
    finally:
        await engine.aclose()


def test_the_shared_context_verifies_certificates_as_the_sdk_would() -> None:
    context = default_tls()
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert context.cert_store_stats()["x509_ca"] > 0  # the CA bundle is loaded
