"""What a browser is told besides the answer (CONTRACT §6): the page's security headers on every response,
and CORS — off by default, for the origins `server.cors_origins` lists — whose preflights need no token."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tests.support.runtimes import make_runtime
from tests.support.servers import Live, running, server_files
from yao_agent.store import SqlStore
from yao_agent.testing import FakeProvider, Reply

SITE = "https://chat.example.com"
PREFLIGHT = {"Origin": SITE, "Access-Control-Request-Method": "POST",
             "Access-Control-Request-Headers": "authorization, content-type, x-chat-id"}  # fmt: skip


@pytest.fixture
async def cors(tmp_path: Path, store: SqlStore, provider: FakeProvider) -> AsyncIterator[Live]:
    """A server whose app.yml lets pages of SITE (and of a local port) call the API."""
    files = server_files(provider.base_url)
    files["app.yml"] += f"server:\n  cors_origins: ['{SITE}', 'http://localhost:5173']\n"
    async with running(make_runtime(tmp_path / "app", store, files)) as served:
        yield served


def cors_headers(response: httpx.Response) -> dict[str, str]:
    return {k: v for k, v in response.headers.items() if k.startswith("access-control-")}


async def test_every_answer_says_how_a_browser_may_use_it(live: Live) -> None:
    async with live.client() as alice, live.client("") as anyone:
        answers = [await anyone.get("/"), await anyone.get("/static/app.js"), await anyone.get("/healthz"),
                   await alice.get("/api/chats"), await anyone.get("/api/chats")]  # fmt: skip
    assert [a.status_code for a in answers] == [200, 200, 200, 200, 401]
    for answer in answers:
        policy = answer.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in policy and "script-src 'self';" in policy, policy
        assert "'unsafe-inline'" not in policy and "'unsafe-eval'" not in policy
        assert answer.headers["x-frame-options"] == "DENY"
        assert answer.headers["referrer-policy"] == "no-referrer"
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert cors_headers(answer) == {}  # no CORS unless app.yml asks for it


async def test_without_cors_origins_a_preflight_is_answered_without_cors(live: Live) -> None:
    """It was a 401: the browser sends a preflight without the token."""
    async with live.client("") as anyone:
        preflight = await anyone.options("/api/assistants/chat/runs", headers=PREFLIGHT)
        with_origin = await anyone.get("/healthz", headers={"Origin": SITE})
    assert (preflight.status_code, preflight.content, cors_headers(preflight)) == (204, b"", {})
    assert cors_headers(with_origin) == {}


async def test_a_listed_origin_may_call_the_api_from_a_browser(cors: Live, provider: FakeProvider) -> None:
    async with cors.client("") as anyone, cors.client() as alice:
        preflight = await anyone.options("/api/assistants/chat/runs", headers=PREFLIGHT)
        local = await anyone.options("/api/chats", headers={**PREFLIGHT, "Origin": "http://localhost:5173"})
        provider.enqueue(Reply(text="hello"))
        body = {"messages": [{"role": "user", "content": "hi"}]}
        answered = await alice.post("/api/assistants/chat/runs?stream=false", json=body, headers={"Origin": SITE})
        refused = await anyone.get("/api/chats", headers={"Origin": SITE})
    assert preflight.status_code == 204
    assert cors_headers(preflight) == {
        "access-control-allow-origin": SITE,
        "access-control-allow-methods": "GET, POST, PUT, PATCH, DELETE",
        "access-control-allow-headers": "authorization, content-type, x-chat-id",
        "access-control-max-age": "600",
    }
    assert "access-control-allow-credentials" not in preflight.headers  # a token, never a cookie
    assert cors_headers(local)["access-control-allow-origin"] == "http://localhost:5173"
    assert answered.status_code == 200, answered.text
    assert cors_headers(answered)["access-control-allow-origin"] == SITE
    assert "X-Chat-Id" in cors_headers(answered)["access-control-expose-headers"]  # a script may read the chat id
    assert "origin" in answered.headers["vary"].lower()
    # A refusal says why to the page as well: the browser lets it read the 401.
    assert (refused.status_code, cors_headers(refused)["access-control-allow-origin"]) == (401, SITE)


async def test_another_origin_gets_no_cors_headers(cors: Live) -> None:
    async with cors.client("") as anyone, cors.client() as alice:
        preflight = await anyone.options("/api/chats", headers={**PREFLIGHT, "Origin": "https://evil.example"})
        called = await alice.get("/api/chats", headers={"Origin": "https://evil.example"})
        prefix = await anyone.options("/api/chats", headers={**PREFLIGHT, "Origin": SITE + ".evil.example"})
    assert (preflight.status_code, cors_headers(preflight)) == (204, {})
    assert (prefix.status_code, cors_headers(prefix)) == (204, {})
    assert called.status_code == 200 and cors_headers(called) == {}  # the browser keeps the answer from the page


@pytest.mark.parametrize("origins", ["['https://chat.example.com/']", "['chat.example.com']", "'*'",
                                     "['https://Chat.example.com']"])  # fmt: skip
def test_cors_origins_must_be_origins(tmp_path: Path, origins: str) -> None:
    from tests.support.apps import make_app
    from yao_agent.dsl.loader import check_app

    root = make_app(tmp_path / "app", {"app.yml": f"server:\n  cors_origins: {origins}\n"})
    errors = [str(p) for p in check_app(root).errors]
    assert errors and all(e.startswith("app.yml:2") and "cors_origins" in e for e in errors), errors


async def test_the_api_reference_pages_may_load_what_they_are_made_of(live: Live) -> None:
    """FastAPI's Swagger UI and ReDoc load their code from a CDN and start it inline: their own policy."""
    async with live.client("") as anyone:
        for path in ("/docs", "/redoc"):
            page = await anyone.get(path)
            policy = page.headers["content-security-policy"]
            assert page.status_code == 200 and "https://cdn.jsdelivr.net" in page.text
            assert "script-src https://cdn.jsdelivr.net 'unsafe-inline'" in policy
            assert "frame-ancestors 'none'" in policy and page.headers["x-frame-options"] == "DENY"
