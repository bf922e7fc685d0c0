"""The openai engine sends what the SDK's own client would (URL and headers), without importing the SDK
where an endpoint is plain, and asks the SDK for the rest."""

from __future__ import annotations

import ssl

import httpx2
import pytest

from yao_agent.connectors.openai_headers import plain_base_url, sdk_request
from yao_agent.connectors.openai_wire import _by_sdk  # pyright: ignore[reportPrivateUsage]
from yao_agent.connectors.providers import Endpoint
from yao_agent.connectors.tls import default_tls

KEY = "sk-test-key-0123456789"
URLS = (
    "http://127.0.0.1:8000/v1",
    "https://api.example.com/v1/",
    "https://api.example.com",
    "http://localhost:11434/api/openai-compat/v1",
    "https://my-host.internal:8443/~team/v1.2",
)
HEADERS: tuple[dict[str, str], ...] = (
    {},
    {"X-Team": "blue"},
    {"user-agent": "mine/1.0", "ACCEPT": "text/plain"},
    {"Authorization": "Bearer other"},
    {"openai-organization": "org-own", "X-Stainless-Async": "no"},
)


@pytest.mark.parametrize("base_url", URLS)
@pytest.mark.parametrize("headers", HEADERS)
@pytest.mark.parametrize("env", [{}, {"OPENAI_ORG_ID": "org-1", "OPENAI_PROJECT_ID": "proj-1"}, {"OPENAI_ORG_ID": ""}])
async def test_a_plain_endpoint_gets_the_sdks_url_and_headers_in_its_order(
    base_url: str, headers: dict[str, str], env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("OPENAI_ORG_ID", "OPENAI_PROJECT_ID", "OPENAI_CUSTOM_HEADERS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    endpoint = Endpoint(api_key=KEY, base_url=base_url, headers=headers)
    said = sdk_request(endpoint)
    assert said is not None
    base, ours = said
    chat, embeddings, theirs = await _by_sdk(endpoint)
    assert (f"{base}chat/completions", f"{base}embeddings") == (chat, embeddings)
    assert list(ours.items()) == list(theirs.items())


@pytest.mark.parametrize(
    "base_url",
    [
        "HTTP://api.example.com/v1",  # the SDK lower-cases it
        "https://API.example.com/v1",
        "http://api.example.com:80/v1",  # and drops the scheme's own port
        "https://api.example.com/v1/../v2",  # and resolves dot segments
        "https://api.example.com/v1?tenant=a",
        "http://127.000.0.1/v1",  # and refuses what is not an IPv4 address
        "http://[::1]:8000/v1",
        "https://xn--bcher-kva.example/v1",
        "https://api.example.com/a%20b",
    ],
)
def test_a_url_the_sdk_would_rewrite_or_refuse_is_left_to_it(base_url: str) -> None:
    assert plain_base_url(base_url) is None
    assert sdk_request(Endpoint(api_key=KEY, base_url=base_url)) is None


def test_what_the_sdk_reads_from_its_own_variables_is_left_to_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_CUSTOM_HEADERS", raising=False)
    assert sdk_request(Endpoint(api_key=None, base_url="http://127.0.0.1:8000/v1")) is None
    assert sdk_request(Endpoint(api_key=KEY, base_url=None)) is None
    assert sdk_request(Endpoint(api_key="workload-identity-auth", base_url="http://127.0.0.1:8000/v1")) is None
    monkeypatch.setenv("OPENAI_CUSTOM_HEADERS", "X-Extra: 1")
    assert sdk_request(Endpoint(api_key=KEY, base_url="http://127.0.0.1:8000/v1")) is None


async def test_what_is_left_to_the_sdk_is_what_its_client_says(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_CUSTOM_HEADERS", "X-Extra: 1\nX-Other: two")
    chat, _, headers = await _by_sdk(Endpoint(api_key=KEY, base_url="HTTP://Example.com:80/v1"))
    assert chat == "http://example.com/v1/chat/completions"
    assert headers["X-Extra"] == "1" and headers["X-Other"] == "two"
    assert headers["Authorization"] == f"Bearer {KEY}"


def test_the_tls_context_is_the_one_the_sdks_transport_makes(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SSL_CERT_FILE", "SSL_CERT_DIR"):
        monkeypatch.delenv(name, raising=False)
    ours, theirs = default_tls(), httpx2.create_ssl_context()
    assert ours.verify_mode == theirs.verify_mode == ssl.CERT_REQUIRED
    assert ours.check_hostname and theirs.check_hostname
    assert (ours.options, ours.minimum_version, ours.verify_flags) == (
        theirs.options,
        theirs.minimum_version,
        theirs.verify_flags,
    )
    assert ours.cert_store_stats() == theirs.cert_store_stats()
    assert ours.get_ca_certs() == theirs.get_ca_certs()
