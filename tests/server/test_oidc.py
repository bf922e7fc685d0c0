"""Sign-in with an OpenID Connect provider, against a real one on loopback (`FakeIdP`: keys made per run).

The API takes the provider's JWTs as bearer tokens beside the app's own `ya_` tokens: verified against
its published keys (signature, issuer, audience, expiry), a rotated key picked up by fetching the key
set again — at most once per REFETCH_S, whatever is sent — and every refusal a 401 saying why. The page
signs in with the authorization-code flow (PKCE) into a session cookie, whose writes need the session's
CSRF token.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
import uvicorn
from fastapi import FastAPI
from playwright.async_api import Page, expect

from tests.support.apps import make_app
from tests.support.clock import Clock
from tests.support.runtimes import make_runtime
from tests.support.servers import assert_error, says, serve, server_files
from yao_agent.dsl.loader import check_app
from yao_agent.identity import OPERATOR, Identity
from yao_agent.server.oidc import REFETCH_S, Verifier
from yao_agent.service.runs import Runs
from yao_agent.store import SqlStore
from yao_agent.testing import FakeProvider, Reply
from yao_agent.testing.fake_idp import FakeIdP, SigningKey

pytestmark = pytest.mark.both_stores  # what it tests is what the database does

BOB = Identity("bob@example.com", "acme")
RUN = "/api/assistants/chat/runs?stream=false"


def oidc_yaml(issuer: str) -> str:
    return (f"server:\n  oidc:\n    issuer: {issuer}\n    audience: yao-api\n    client_id: yao-web\n"
            "    admin: {claim: roles, value: yao-admin}\n"
            "    operator: {claim: roles, value: yao-operator}\n")  # fmt: skip


@dataclass
class Served:
    url: str
    runs: Runs
    verifier: Verifier
    clock: Clock  # the verifier's: when the key set may be fetched again

    def client(self, token: str | None = None, **kwargs: Any) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.AsyncClient(base_url=self.url, headers=headers, timeout=30, **kwargs)


def verifier_of(server: uvicorn.Server) -> Verifier:
    """The served app's verifier (its clock and timeout are the test's to set before its first fetch)."""
    app = server.config.app
    assert isinstance(app, FastAPI) and isinstance(app.state.oidc, Verifier)
    return app.state.oidc


@pytest.fixture
async def idp() -> AsyncIterator[FakeIdP]:
    async with FakeIdP() as running:
        yield running


@pytest.fixture
async def served(tmp_path: Path, store: SqlStore, provider: FakeProvider, idp: FakeIdP) -> AsyncIterator[Served]:
    files = server_files(provider.base_url)
    files["app.yml"] += oidc_yaml(idp.issuer)
    rt = make_runtime(tmp_path / "app", store, files)
    runs = Runs(rt)
    server, task, url = await serve(runs)
    verifier = verifier_of(server)
    verifier.clock = clock = Clock()
    try:
        yield Served(url, runs, verifier, clock)
    finally:
        server.should_exit = True
        await task
        await verifier.aclose()
        await rt.engines.aclose()


async def chat_of(served: Served, client: httpx.AsyncClient, text: str = "hello", **headers: str) -> str:
    response = await client.post(RUN, json={"messages": says(text)}, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()["chat_id"]


# --- bearer JWTs ---------------------------------------------------------------------------------------


async def test_a_providers_token_is_the_caller_its_claims_name(served: Served, idp: FakeIdP) -> None:
    async with served.client(idp.mint()) as bob:
        chat_id = await chat_of(served, bob)
    assert [c.id for c in await served.runs.rt.store.list_chats(BOB)] == [chat_id]
    member, admin = idp.mint(), idp.mint(roles=["staff", "yao-admin"])
    async with served.client(member) as as_member, served.client(admin) as as_admin:
        assert_error(await as_member.put("/api/roles/default", json={"connector": "demo.echo"}), 403)
        assert (await as_admin.put("/api/roles/default", json={"connector": "demo.echo"})).status_code == 200
    assert await served.runs.rt.store.get_role(("team", "acme"), "default") == ("demo.echo",)


async def test_the_apps_own_tokens_work_beside_it(served: Served, idp: FakeIdP) -> None:
    token = await served.runs.rt.store.create_token(OPERATOR, Identity("alice"))
    async with served.client(token) as alice, served.client(idp.mint()) as bob:
        assert (await alice.get("/api/chats")).status_code == 200
        bobs = await chat_of(served, bob)
        assert_error(await alice.get(f"/api/chats/{bobs}/messages"), 404)  # another tenant's chat is not there
    async with served.client(idp.mint(email="eve@example.com", org="beta")) as eve:
        assert_error(await eve.get(f"/api/chats/{bobs}/messages"), 404)
        assert (await eve.get("/api/chats")).json()["chats"] == []


def refused(idp: FakeIdP) -> dict[str, tuple[str, str]]:
    """Tokens the API must refuse, and what its 401 says of each."""
    stray = SigningKey.new(idp.keys[-1].kid)  # the right kid, another key: a signature that does not verify
    return {
        "expired": (idp.mint(expires_in=-3600), "the token has expired"),
        "wrong audience": (idp.mint(audience="someone-else"), "audience is not yao-api"),
        "wrong issuer": (idp.mint(iss="https://evil.example"), f"issuer is not {idp.issuer}"),
        "alg none": (idp.forged("none"), "algorithm 'none' is not accepted"),
        "HS256 keyed with the public key": (idp.forged("hs256"), "algorithm 'HS256' is not accepted"),
        "unknown key": (idp.mint(key=SigningKey.new("k-unknown")), "signing key 'k-unknown' is not among"),
        "bad signature": (idp.mint(key=stray), "signature does not verify"),
        "not yet valid": (idp.mint(nbf=int(time.time()) + 3600), "not valid yet"),
        "no user claim": (idp.mint(email=None), "no email claim"),
        "not a JWT": ("a.b.c", "not a well-formed JWT"),
    }


async def test_a_bad_token_is_a_401_saying_what_is_wrong(served: Served, idp: FakeIdP) -> None:
    async with served.client() as anyone:
        for name, (token, said) in refused(idp).items():
            response = await anyone.get("/api/chats", headers={"Authorization": f"Bearer {token}"})
            error = assert_error(response, 401, "unauthorized")
            assert said in error["message"], (name, error)
            assert response.headers["www-authenticate"] == "Bearer"
    assert await served.runs.rt.store.list_chats(BOB) == []


async def test_a_rotated_key_is_fetched_and_a_flood_of_unknown_keys_is_not(served: Served, idp: FakeIdP) -> None:
    async with served.client() as anyone:

        async def status(token: str) -> int:
            return (await anyone.get("/api/chats", headers={"Authorization": f"Bearer {token}"})).status_code

        assert await status(idp.mint()) == 200
        assert idp.jwks_fetches == 1
        flood = [idp.mint(key=SigningKey.new(f"made-up-{n}", "ES256")) for n in range(20)]
        assert await asyncio.gather(*(status(t) for t in flood)) == [401] * 20
        assert idp.jwks_fetches == 1  # within REFETCH_S of the last fetch: none at all
        old = idp.mint()
        idp.rotate()
        served.clock.advance(REFETCH_S)
        assert await asyncio.gather(*(status(idp.mint()) for _ in range(10))) == [200] * 10
        assert idp.jwks_fetches == 2  # ten requests waited on one fetch
        assert await status(old) == 401  # the retired key is gone from the set
        served.clock.advance(REFETCH_S)
        idp.rotate("ES256")
        assert await status(idp.mint()) == 200


async def test_a_provider_that_is_down_is_a_503_and_never_stalls_the_server(served: Served, idp: FakeIdP) -> None:
    token = idp.mint()
    await idp.close()
    async with served.client(token) as bob:
        assert_error(await bob.get("/api/chats"), 503, "unavailable")
        again = await bob.get("/api/chats")  # within REFETCH_S: told at once, the provider not asked again
        assert "did not answer" in assert_error(again, 503, "unavailable")["message"]
        assert (await bob.get("/healthz")).status_code == 200


async def test_a_provider_that_hangs_is_a_503_after_the_timeout_while_others_are_served(
    tmp_path: Path, store: SqlStore, provider: FakeProvider
) -> None:

    async def silent_provider(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # accepts, reads, never answers; done when the caller gives up and hangs up
        writer.close()

    silent = await asyncio.start_server(silent_provider, "127.0.0.1", 0)
    port = silent.sockets[0].getsockname()[1]
    files = server_files(provider.base_url)
    files["app.yml"] += oidc_yaml(f"http://127.0.0.1:{port}")
    rt = make_runtime(tmp_path / "app", store, files)
    server, task, url = await serve(Runs(rt))
    verifier_of(server).timeout_s = 2.0
    try:
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            assert (await client.get("/healthz")).status_code == 200  # (a first answer: the server is warm)
            token = jwt.encode({"sub": "x"}, SigningKey.new("k1", "ES256").private, "ES256", {"kid": "k1"})  # pyright: ignore[reportArgumentType]
            started = time.monotonic()
            jwt_call = asyncio.create_task(client.get("/api/chats", headers={"Authorization": f"Bearer {token}"}))
            await asyncio.sleep(0.2)
            assert (await client.get("/healthz")).status_code == 200
            assert not jwt_call.done()  # the event loop served others while that one waited on the provider
            assert_error(await jwt_call, 503, "unavailable")
            assert 2.0 <= time.monotonic() - started < 15
    finally:
        server.should_exit = True
        await task
        await verifier_of(server).aclose()
        silent.close()
        await silent.wait_closed()


# --- the page's sign-in --------------------------------------------------------------------------------


@asynccontextmanager
async def signed_in(served: Served) -> AsyncGenerator[tuple[httpx.AsyncClient, dict[str, Any]]]:
    """A browser-less sign-in (redirects followed, cookies kept): the client and its /auth/session."""
    async with httpx.AsyncClient(base_url=served.url, timeout=30, follow_redirects=True) as browser:
        yield browser, await sign_in(browser)


async def sign_in(browser: httpx.AsyncClient) -> dict[str, Any]:
    page = await browser.get("/auth/login")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html"), page.text
    hops = [(r.status_code, r.url.path) for r in page.history]
    assert hops == [(302, "/auth/login"), (302, "/authorize"), (303, "/auth/callback")], hops
    cookie = page.history[-1].headers["set-cookie"]
    assert "yao_session=" in cookie and "HttpOnly" in cookie and "SameSite=lax" in cookie, cookie
    assert "Secure" not in cookie  # plain http on loopback: a Secure cookie would never be sent back
    return (await browser.get("/auth/session")).json()


async def test_the_page_signs_in_with_the_code_flow_and_pkce(served: Served, idp: FakeIdP) -> None:
    async with served.client() as anyone:
        assert (await anyone.get("/auth/session")).json() == {"oidc": True, "signed_in": False}
    async with signed_in(served) as (browser, session):
        assert {k: session[k] for k in ("signed_in", "user_id", "team_id", "admin")} == {
            "signed_in": True, "user_id": "bob@example.com", "team_id": "acme", "admin": False}  # fmt: skip
        exchange = idp.token_requests[-1]
        assert exchange["grant_type"] == "authorization_code" and len(exchange["code_verifier"]) >= 43
        assert "client_secret" not in exchange
        chat_id = await chat_of(served, browser, **{"X-CSRF-Token": session["csrf"]})
        assert [c["chat_id"] for c in (await browser.get("/api/chats")).json()["chats"]] == [chat_id]
    assert [c.id for c in await served.runs.rt.store.list_chats(BOB)] == [chat_id]


async def test_a_write_with_the_cookie_needs_the_csrf_token(served: Served) -> None:
    async with signed_in(served) as (browser, session):
        for headers in ({}, {"X-CSRF-Token": "not-the-token"}):
            refused = await browser.post(RUN, json={"messages": says("hi")}, headers=headers)
            assert "X-CSRF-Token" in assert_error(refused, 403, "forbidden")["message"]
        # what another site's form can send: the cookie rides along (were it not Lax), no header can
        form = await browser.post(RUN, data={"messages": "hi"}, headers={"Origin": "https://evil.example"})
        assert_error(form, 403, "forbidden")
        assert_error(await browser.post("/auth/logout"), 403, "forbidden")
        assert await served.runs.rt.store.list_chats(BOB) == []
        cookie = browser.cookies["yao_session"]
        out = await browser.post("/auth/logout", headers={"X-CSRF-Token": session["csrf"]})
        assert out.status_code == 204 and "yao_session" not in browser.cookies
        assert (await browser.get("/auth/session")).json()["signed_in"] is False
    async with served.client(cookies={"yao_session": cookie}) as replayed:  # the old cookie, sent again
        assert "sign in again" in assert_error(await replayed.get("/api/chats"), 401)["message"]


async def test_an_operator_signs_in_sees_every_team_and_is_audited_as_signed_in(served: Served, idp: FakeIdP) -> None:
    for who, team in (("bob@example.com", "acme"), ("eve@example.com", "beta")):
        async with served.client(idp.mint(email=who, org=team)) as member:
            await chat_of(served, member)
    async with served.client(idp.mint(email="mia@example.com", org="acme", roles="yao-operator")) as bearer:
        assert [r["key"] for r in (await bearer.get("/api/usage?by=team")).json()["rows"]] == ["acme", "beta"]
    idp.signs_in = {"email": "olga@example.com", "roles": ["staff", "yao-operator"]}
    async with signed_in(served) as (browser, session):
        assert (session["user_id"], session["team_id"], session["operator"]) == ("olga@example.com", None, True)
        report = (await browser.get("/api/usage", params={"by": "team"})).json()
        assert [(r["key"], r["runs"]) for r in report["rows"]] == [("acme", 1), ("beta", 1)]
        made = await browser.post("/api/tokens", json={"user": "dan", "team": "beta", "admin": True},
                                  headers={"X-CSRF-Token": session["csrf"]})  # fmt: skip
        assert made.status_code == 200 and made.json()["kind"] == "admin", made.text
        audit = (await browser.get("/api/audit", params={"action": "token"})).json()["rows"]
    assert [(r["action"], r["actor"]) for r in audit] == [
        ("token.create", {"user_id": "olga@example.com", "team_id": None, "kind": "oidc"})]  # fmt: skip
    idp.signs_in = {"email": "bob@example.com", "org": "acme", "roles": "yao-admin"}  # a team admin: one team
    async with signed_in(served) as (browser, session):
        assert (session["admin"], session["operator"]) == (True, False)
        assert_error(await browser.get("/api/usage", params={"by": "team"}), 403)


async def test_a_callback_this_browser_did_not_start_is_refused(served: Served, idp: FakeIdP) -> None:
    async with served.client(follow_redirects=False) as browser:
        started = await browser.get("/auth/login")
        assert started.status_code == 302 and started.headers["location"].startswith(idp.issuer + "/authorize?")
        assert "code_challenge_method=S256" in started.headers["location"]
        forged = await browser.get("/auth/callback", params={"code": "x", "state": "forged"})
        assert "state does not match" in assert_error(forged, 400)["message"]
    async with served.client() as stranger:  # no login cookie at all
        alone = await stranger.get("/auth/callback", params={"code": "x", "state": "s"})
        assert "no sign-in was started" in assert_error(alone, 400)["message"]
        denied = await stranger.get("/auth/callback", params={"error": "access_denied"})
        assert "refused the sign-in" in assert_error(denied, 401)["message"]
    assert await served.runs.rt.store.list_chats(BOB) == []


async def test_without_oidc_the_page_is_told_so(tmp_path: Path, store: SqlStore, provider: FakeProvider) -> None:
    rt = make_runtime(tmp_path / "app", store, server_files(provider.base_url))
    server, task, url = await serve(Runs(rt))
    try:
        async with httpx.AsyncClient(base_url=url, timeout=30) as anyone:
            assert (await anyone.get("/auth/session")).json() == {"oidc": False, "signed_in": False}
            assert "not configured" in assert_error(await anyone.get("/auth/login"), 400)["message"]
            assert_error(await anyone.get("/api/chats", headers={"Authorization": "Bearer a.b.c"}), 401)
    finally:
        server.should_exit = True
        await task


@pytest.mark.browser
@pytest.mark.parametrize("store_raw_url", ["sqlite"], indirect=True)  # the store does not matter to the page
async def test_the_page_signs_in_through_the_provider_and_chats(
    served: Served, provider: FakeProvider, page: Page
) -> None:
    await page.goto(served.url + "/")
    await expect(page.locator("#token-form")).to_be_hidden()  # no pasted token when the provider signs in
    await page.click("#oidc-login")
    await expect(page.locator("#signed-in-label")).to_have_text("Signed in as bob@example.com")
    assert "yao_session" not in await page.evaluate("document.cookie")  # HttpOnly: no script reads it
    assert await page.evaluate("Object.keys(localStorage)") == []  # no token kept where scripts can read it
    await page.select_option("#assistant", "chat")
    provider.enqueue(Reply(text="Hello Bob."))
    await page.fill("#message", "Hi")
    await page.click("#send")  # a write: the page sends the session's CSRF token with it
    await expect(page.locator("#transcript .turn").last.locator(".kind-text .bubble")).to_have_text("Hello Bob.")
    assert len(await served.runs.rt.store.list_chats(BOB)) == 1
    await page.click("#sign-out")
    await expect(page.locator("#oidc-login")).to_be_visible()
    await page.reload()
    await expect(page.locator("#oidc-login")).to_be_visible()  # the session ended on the server, not just here


# --- app.yml -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("oidc", "field"),
    [("{issuer: https://id.example.com, audience: a, client_id: c, client_secret: s3cret}", "client_secret"),
     ("{issuer: id.example.com, audience: a, client_id: c}", "issuer"),
     ("{issuer: https://id.example.com, client_id: c}", "audience"),
     ("{issuer: https://id.example.com, audience: a, client_id: c, operator: {claim: roles}}", "value")],
)  # fmt: skip
def test_server_oidc_is_checked_where_it_is_written(tmp_path: Path, oidc: str, field: str) -> None:
    root = make_app(tmp_path / "app", {"app.yml": f"history_size: 5\nserver:\n  oidc: {oidc}\n"})
    errors = [str(p) for p in check_app(root).errors]
    assert errors and all(e.startswith("app.yml:3") and field in e for e in errors), errors
    assert not any("s3cret" in e for e in errors)
