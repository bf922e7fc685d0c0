"""Tokens over real HTTP: a team admin issues and revokes its members' tokens, tokens expire and say so, each
notes its last use, and the operator sees and acts on every team; and the misuses (a member minting, an
admin minting for another team or an operator, a foreign token id) are refused and change nothing.

The server is the usage app's (tests/support/usage.py): alice (no team), bob and carol of acme (bob_admin is
acme's admin), dave and erin of beta (erin is beta's admin); `ops` is an operator token made here.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from tests.support.clock import Clock
from tests.support.servers import Live, assert_error, client_for
from tests.support.usage import run_as
from yao_agent.identity import OPERATOR, Identity
from yao_agent.messages import iso_time
from yao_agent.service.tokens import Tokens
from yao_agent.store.schema import tokens as token_table
from yao_agent.testing import FakeProvider

pytestmark = pytest.mark.both_stores  # what it tests is what the database does

DAY_S = 86_400


async def operator_token(live: Live, team: str | None = None) -> str:
    live.tokens["ops"] = await live.rt.store.create_token(OPERATOR, Identity("ops", team, operator=True))
    return live.tokens["ops"]


async def call(live: Live, who: str, method: str, path: str, **kwargs: Any) -> httpx.Response:
    async with live.client(who) as client:
        return await client.request(method, path, **kwargs)


async def listed(live: Live, who: str) -> list[dict[str, Any]]:
    response = await call(live, who, "GET", "/api/tokens")
    assert response.status_code == 200, response.text
    return response.json()["tokens"]


async def made(live: Live) -> list[tuple[str, str, str | None, str, float | None]]:
    """Every token stored: (id, user, team, kind, revoked_at) — not their last use, which a request notes."""
    return [(t.id, t.user_id, t.team_id, t.kind, t.revoked_at) for t in await live.rt.store.list_tokens(OPERATOR)]


async def stored_rows(live: Live) -> str:
    """Every column of every stored token, as text (to look for a secret in)."""
    rows = await live.rt.store.db.read_tx(lambda tx: tx.all(select(token_table)))
    return repr(rows)


async def test_a_team_admin_issues_a_members_token_and_revokes_it(
    usage_live: Live, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    asked = {"user": "frank", "label": "frank's laptop", "expires_in_days": 30}
    answer = await call(usage_live, "bob_admin", "POST", "/api/tokens", json=asked)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    secret = body.pop("token")
    assert secret.startswith("ya_") and body["id"].startswith("tok_") and body["id"][4:] not in secret
    assert body == {"id": body["id"], "user_id": "frank", "team_id": "acme", "kind": "member", "admin": False,
                    "label": "frank's laptop", "created_at": body["created_at"],
                    "expires_at": iso_time(clock() + 30 * DAY_S)}  # fmt: skip
    async with client_for(usage_live, secret) as frank:
        assert (await frank.get("/api/chats")).status_code == 200
        assert [t["id"] for t in (await frank.get("/api/tokens")).json()["tokens"]] == [body["id"]]  # his own only
    await usage_live.runs.tenancy.tokens.aclose()  # the last use is written after the answer
    team = await listed(usage_live, "bob_admin")
    assert {(t["user_id"], t["kind"]) for t in team} == {("bob", "member"), ("carol", "member"),
                                                         ("bob", "admin"), ("frank", "member")}  # fmt: skip
    franks = next(t for t in team if t["id"] == body["id"])
    assert franks["last_used_at"] == iso_time(clock()) and franks["label"] == "frank's laptop"
    assert not franks["expired"] and "token" not in franks

    revoked = await call(usage_live, "bob_admin", "DELETE", f"/api/tokens/{body['id']}")
    assert revoked.status_code == 200 and revoked.json() == {"id": body["id"], "revoked": True}
    async with client_for(usage_live, secret) as frank:
        error = assert_error(await frank.get("/api/chats"), 401, "unauthorized")
    assert error["code"] == "unauthorized" and "expired" not in error["message"]  # revoked: the generic 401
    assert_error(await call(usage_live, "bob_admin", "DELETE", f"/api/tokens/{body['id']}"), 404, "not_found")
    assert body["id"] not in {t["id"] for t in await listed(usage_live, "bob_admin")}
    assert secret not in await stored_rows(usage_live) and secret not in caplog.text


async def test_an_expired_token_is_a_401_that_says_it_expired(usage_live: Live, clock: Clock) -> None:
    answer = await call(usage_live, "erin", "POST", "/api/tokens", json={"user": "gus", "expires_in_days": 1})
    assert answer.status_code == 200, answer.text
    secret = answer.json()["token"]
    async with client_for(usage_live, secret) as gus:
        assert (await gus.get("/api/chats")).status_code == 200
        clock.now += DAY_S - 1
        assert (await gus.get("/api/chats")).status_code == 200  # a second before it expires
        clock.now += 1
        for method, path in (("GET", "/api/chats"), ("POST", "/api/assistants/chat/runs")):
            response = await gus.request(method, path, content=b"{not json")  # the token is checked first
            error = assert_error(response, 401, "unauthorized")
            assert error["code"] == "token_expired" and response.headers["www-authenticate"] == "Bearer"
            assert "expired at" in error["message"] and secret not in error["message"]
    beta = {t["user_id"]: t for t in await listed(usage_live, "erin")}
    assert beta["gus"]["expired"] is True and beta["dave"]["expired"] is False


MISUSES: dict[str, tuple[str, dict[str, Any]]] = {
    "a member mints a token for a new member": ("carol", {"user": "mallory"}),
    "a member mints a token for themselves": ("carol", {"user": "carol"}),
    "a member mints an admin token": ("carol", {"user": "carol", "admin": True}),
    "a caller without a team mints one": ("alice", {"user": "alice"}),
    "an admin mints for another team": ("bob_admin", {"user": "mallory", "team": "beta"}),
    "an admin mints an admin of another team": ("erin", {"user": "mallory", "team": "acme", "admin": True}),
    "an admin mints an operator token": ("bob_admin", {"user": "mallory", "operator": True}),
    "an admin mints an operator token of no team": ("erin", {"user": "erin", "team": "beta", "operator": True}),
    "a member mints an operator token": ("dave", {"user": "dave", "operator": True}),
}


@pytest.mark.parametrize(("who", "body"), MISUSES.values(), ids=list(MISUSES))
async def test_minting_what_the_caller_may_not_is_a_403_and_makes_nothing(
    usage_live: Live, who: str, body: dict[str, Any]
) -> None:
    before = await made(usage_live)
    assert_error(await call(usage_live, who, "POST", "/api/tokens", json=body), 403, "forbidden")
    assert await made(usage_live) == before


BAD_BODIES: dict[str, tuple[dict[str, Any], str]] = {
    "no user": ({}, "user"),
    "a user id with a slash": ({"user": "acme/mallory"}, "user"),
    "a team id with a space": ({"user": "x", "team": "a team"}, "team"),
    "zero days": ({"user": "x", "expires_in_days": 0}, "expires_in_days"),
    "days as text": ({"user": "x", "expires_in_days": "30"}, "expires_in_days"),
    "admin as text": ({"user": "x", "admin": "yes"}, "admin"),
    "a label of two lines": ({"user": "x", "label": "a\nb"}, "label"),
    "an unknown field": ({"user": "x", "scopes": ["all"]}, "scopes"),
}


@pytest.mark.parametrize(("body", "field"), BAD_BODIES.values(), ids=list(BAD_BODIES))
async def test_a_bad_token_request_is_a_400_naming_the_field(
    usage_live: Live, body: dict[str, Any], field: str
) -> None:
    before = await made(usage_live)
    error = assert_error(await call(usage_live, "bob_admin", "POST", "/api/tokens", json=body), 400)
    assert field in error["message"], error
    assert await made(usage_live) == before


async def test_revoking_a_token_the_caller_may_not_see_is_a_404_and_it_keeps_working(usage_live: Live) -> None:
    await operator_token(usage_live, team="acme")  # an operator's, of team acme: still not acme's admins' to see
    ids = {(t.user_id, t.kind): t.id for t in await usage_live.rt.store.list_tokens(OPERATOR)}
    attempts = [("erin", ids[("carol", "member")]), ("dave", ids[("carol", "member")]),
                ("carol", ids[("bob", "admin")]), ("bob", ids[("carol", "member")]),
                ("bob_admin", ids[("ops", "operator")]), ("bob_admin", ids[("dave", "member")]),
                ("alice", ids[("bob", "member")]), ("bob_admin", "tok_never-was")]  # fmt: skip
    messages: set[str] = set()
    for who, token_id in attempts:
        error = assert_error(await call(usage_live, who, "DELETE", f"/api/tokens/{token_id}"), 404, "not_found")
        messages.add(error["message"].replace(token_id, "ID"))
    assert len(messages) == 1  # another team's id is told apart from one that never was by nothing
    for who in ("carol", "bob_admin", "ops", "dave", "bob"):
        assert (await call(usage_live, who, "GET", "/api/chats")).status_code == 200, who
    assert ("ops", "operator") not in {(t["user_id"], t["kind"]) for t in await listed(usage_live, "bob_admin")}
    mine = await call(usage_live, "carol", "DELETE", f"/api/tokens/{ids[('carol', 'member')]}")
    assert mine.status_code == 200  # a member revokes their own token
    assert_error(await call(usage_live, "carol", "GET", "/api/chats"), 401)


async def test_the_operator_sees_every_teams_usage_and_budgets_and_mints_any_token(
    usage_live: Live, provider: FakeProvider
) -> None:
    await operator_token(usage_live)
    for who in ("bob", "dave", "alice"):
        await run_as(usage_live, provider, who, "priced", (1000, 250))
    report = (await call(usage_live, "ops", "GET", "/api/usage", params={"by": "team"})).json()
    assert report["scope"] == {} and [(r["key"], r["runs"]) for r in report["rows"]] == [("", 1), ("acme", 1),
                                                                                       ("beta", 1)]  # fmt: skip
    assert report["total"]["runs"] == 3
    beta = (await call(usage_live, "ops", "GET", "/api/usage", params={"team": "beta", "by": "user"})).json()
    assert beta["scope"] == {"team_id": "beta"} and [r["key"] for r in beta["rows"]] == ["dave"]
    ceiling = await call(usage_live, "ops", "PUT", "/api/budgets", params={"team": "beta"}, json={"per_month": 50})
    assert ceiling.status_code == 200, ceiling.text
    month = next(b for b in ceiling.json()["budgets"] if b["window"] == "per_month")
    assert (month["ceiling_usd"], month["ceiling_source"], month["id"]) == (50, "operator", "beta")
    seen = await call(usage_live, "ops", "GET", "/api/budgets", params={"team": "beta"})
    assert seen.json()["scope"] == {"team_id": "beta"} and seen.json()["budgets"] == ceiling.json()["budgets"]
    app = await call(usage_live, "ops", "GET", "/api/app")
    assert app.status_code == 200 and app.json()["errors"] == []
    hana = await call(usage_live, "ops", "POST", "/api/tokens", json={"user": "hana", "team": "beta", "admin": True})
    assert (hana.json()["kind"], hana.json()["team_id"]) == ("admin", "beta")
    other = await call(usage_live, "ops", "POST", "/api/tokens", json={"user": "ops2", "operator": True})
    assert (other.json()["kind"], other.json()["team_id"]) == ("operator", None)
    everyone = {(t["user_id"], t["kind"]) for t in await listed(usage_live, "ops")}
    assert {("alice", "member"), ("dave", "member"), ("hana", "admin"), ("ops2", "operator")} <= everyone


OPERATORS_ONLY = [
    ("GET", "/api/usage", {"by": "team"}, None),
    ("GET", "/api/usage", {"team": "beta"}, None),
    ("GET", "/api/budgets", {"team": "beta"}, None),
    ("PUT", "/api/budgets", {"team": "beta"}, {"per_day": 1}),
]


@pytest.mark.parametrize("who", ["bob_admin", "carol", "alice"])
async def test_another_teams_views_are_the_operators_only(usage_live: Live, who: str) -> None:
    for method, path, params, body in OPERATORS_ONLY:
        response = await call(usage_live, who, method, path, params=params, json=body)
        assert_error(response, 403, "forbidden")
    assert await usage_live.rt.store.list_budgets(OPERATOR) == []


async def test_the_last_use_is_written_at_most_once_a_minute(usage_live: Live, clock: Clock) -> None:
    secret = usage_live.tokens["carol"]
    tokens = usage_live.runs.tenancy.tokens
    start = clock()

    async def last_used() -> float | None:
        await tokens.aclose()
        return next(t.last_used_at for t in await usage_live.rt.store.list_tokens(OPERATOR) if t.user_id == "carol")

    assert await tokens.identity_for(secret) == Identity("carol", "acme")
    assert await last_used() == start
    clock.now += 59
    await tokens.identity_for(secret)
    assert not tokens.marks.pending and await last_used() == start  # within the minute: no write at all
    clock.now += 1
    await tokens.identity_for(secret)
    assert await last_used() == start + 60
    elsewhere = Tokens(usage_live.runs.process)  # another process: it reads the stored time, and writes nothing
    clock.now += 30
    await elsewhere.identity_for(secret)
    assert not elsewhere.marks.pending and await last_used() == start + 60
