"""The `openai` engine's clients: one TLS context for all of them, made once, off the event loop."""

from __future__ import annotations

import ssl
import threading

import pytest

from tests.support.connectors import assemble, drain, fake_connector
from yao_agent.connectors import Engines
from yao_agent.connectors.openai_engine import OpenAIEngine
from yao_agent.connectors.tls import default_tls, on_thread
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


async def test_a_failure_to_make_the_tls_context_reaches_the_call(provider: FakeProvider) -> None:
    def broken() -> ssl.SSLContext:
        raise ssl.SSLError("no CA bundle here")

    engines = Engines({"openai": OpenAIEngine(on_thread(broken))})
    try:
        with pytest.raises(ssl.SSLError, match="no CA bundle here"):
            await drain([fake_connector(provider.base_url)], engines=engines)
    finally:
        await engines.aclose()


def test_the_shared_context_verifies_certificates_as_the_sdk_would() -> None:
    context = default_tls()
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert context.cert_store_stats()["x509_ca"] > 0  # the CA bundle is loaded
