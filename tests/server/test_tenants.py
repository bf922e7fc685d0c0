"""Tenants over real HTTP: no read or write crosses from one identity to another, on any route of CONTRACT §6.

Three tenants (tests/server/conftest.py): alice (no team), bob and carol (both in team acme; bob also
has an admin token, bob_admin). A chat belongs to one (user, team) pair: anybody else gets the 404 a chat
that never existed gets, never a 403 that would confirm the id. Role settings belong to the caller's
team (changed by its admins only), or to the user without one.
The identity comes from the bearer token only; a body that names a user or a team never changes it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.support.servers import TENANTS, Live, assert_error, client_for, says
from yao_agent.identity import OPERATOR, Identity
from yao_agent.testing import FakeProvider, Reply

pytestmark = pytest.mark.both_stores  # what it tests is what the database does

ALICE, BOB, CAROL = TENANTS["alice"], TENANTS["bob"], TENANTS["carol"]


async def native_run(client: httpx.AsyncClient, text: str, **body: Any) -> dict[str, Any]:
    response = await client.post("/api/assistants/chat/runs?stream=false", json={"messages": says(text), **body})
    assert response.status_code == 200, response.text
    return response.json()


async def completion(client: httpx.AsyncClient, text: str, **extra: Any) -> tuple[str, str]:
    """An OpenAI-compatible completion: (its chat id, its reply)."""
    response = await client.post("/v1/chat/completions", json={"model": "chat", "messages": says(text), **extra})
    assert response.status_code == 200, response.text
    return response.headers["x-chat-id"], response.json()["choices"][0]["message"]["content"]


async def chat_ids(client: httpx.AsyncClient) -> list[str]:
    response = await client.get("/api/chats")
    assert response.status_code == 200, response.text
    return [c["chat_id"] for c in response.json()["chats"]]


async def snapshot(live: Live, who: Identity, client: httpx.AsyncClient, chat_id: str) -> dict[str, Any]:
    """Everything the owner can observe of one chat: listing, messages, resume point, runs."""
    listed = [c for c in (await client.get("/api/chats")).json()["chats"] if c["chat_id"] == chat_id]
    resume = await client.get(f"/api/chats/{chat_id}/resume")
    return {
        "listed": listed,
        "messages": (await client.get(f"/api/chats/{chat_id}/messages?versions=true")).json(),  # (earlier ones too)
        "resume": (resume.status_code, resume.json()),
        "runs": [(r.id, r.status, r.reason) for r in await live.rt.store.runs_of(who, chat_id)],
    }


def chat_requests(chat_id: str) -> list[tuple[str, str, dict[str, Any]]]:
    """Every request that names an existing chat: (method, path, httpx keyword arguments)."""
    return [
        ("GET", f"/api/chats/{chat_id}/messages", {}),
        ("GET", f"/api/chats/{chat_id}/resume", {}),
        ("POST", f"/api/chats/{chat_id}/resume", {}),
        ("POST", f"/api/chats/{chat_id}/resume?stream=false", {}),
        ("POST", f"/api/chats/{chat_id}/cancel", {}),
        ("POST", f"/api/chats/{chat_id}/append", {"json": {"messages": says("intruder append")}}),
        ("GET", f"/api/chats/{chat_id}/approvals", {}),
        ("POST", f"/api/chats/{chat_id}/approvals", {"json": {"decisions": [{"tool_call_id": "t1", "approve": True}]}}),
        ("PATCH", f"/api/chats/{chat_id}", {"json": {"title": "intruder title"}}),
        ("DELETE", f"/api/chats/{chat_id}", {}),
        ("GET", f"/api/chats/{chat_id}/messages?versions=true", {}),
        ("POST", f"/api/chats/{chat_id}/regenerate", {}),
        ("POST", f"/api/chats/{chat_id}/regenerate?stream=false", {"json": {}}),
        ("POST", f"/api/chats/{chat_id}/edit", {"json": {"message_id": "msg_1", "content": "intruder edit"}}),
        ("POST", f"/api/chats/{chat_id}/edit?stream=false", {"json": {"message_id": "msg_1", "content": "x"}}),
    ]


def run_requests(chat_id: str) -> list[tuple[str, str, dict[str, Any]]]:
    """Every way to run on an existing chat: native (SSE and JSON), OpenAI (header, metadata, streamed) and
    Anthropic (header, streamed)."""
    native = {"messages": says("intruder run"), "chat_id": chat_id}
    openai = {"model": "chat", "messages": says("intruder completion")}
    anthropic = {"model": "chat", "max_tokens": 100, "messages": says("intruder message")}
    return [
        ("POST", "/api/assistants/chat/runs?stream=false", {"json": native}),
        ("POST", "/api/assistants/chat/runs", {"json": native}),
        ("POST", "/v1/chat/completions", {"json": openai, "headers": {"X-Chat-Id": chat_id}}),
        ("POST", "/v1/chat/completions", {"json": {**openai, "metadata": {"chat_id": chat_id}}}),
        ("POST", "/v1/chat/completions", {"json": {**openai, "stream": True}, "headers": {"X-Chat-Id": chat_id}}),
        ("POST", "/v1/messages", {"json": anthropic, "headers": {"X-Chat-Id": chat_id}}),
        ("POST", "/v1/messages", {"json": {**anthropic, "stream": True}, "headers": {"X-Chat-Id": chat_id}}),
    ]


def response_requests(chat_id: str, run_id: str) -> list[tuple[str, str, dict[str, Any]]]:
    """Every way to read or continue a run of the chat as a Responses API response."""
    rid = f"resp_{run_id}.{chat_id}"
    asked = {"model": "chat", "input": "intruder response", "previous_response_id": rid}
    return [
        ("GET", f"/v1/responses/{rid}", {}),
        ("POST", "/v1/responses", {"json": asked}),
        ("POST", "/v1/responses", {"json": {**asked, "stream": True}}),
    ]


# --- another tenant's chat ---------------------------------------------------------------------------


async def test_another_tenants_chat_is_a_404_on_every_route_and_stays_untouched(
    live: Live, provider: FakeProvider
) -> None:
    provider.enqueue(Reply(text="native answer"), Reply(status=500, error_message="upstream down"))
    provider.enqueue(Reply(text="openai answer"))
    async with live.client("alice") as alice, live.client("bob") as bob:
        first = await native_run(alice, "hello natively")
        native_chat = first["chat_id"]
        failed = await native_run(alice, "and again", chat_id=native_chat)  # leaves a resume point
        assert (failed["status"], failed["reason"]) == ("failed", "model_error")
        openai_chat, reply = await completion(alice, "hello openai")
        assert reply == "openai answer" and openai_chat != native_chat
        assert (await alice.get(f"/api/chats/{native_chat}/resume")).status_code == 200

        before = {c: await snapshot(live, ALICE, alice, c) for c in (native_chat, openai_chat)}
        model_calls = len(provider.requests)
        for chat_id in (native_chat, openai_chat):
            for method, path, kwargs in chat_requests(chat_id):
                response = await bob.request(method, path, **kwargs)
                error = assert_error(response, 404, "not_found")
                # Exactly what a chat that never existed gets: the id reveals nothing.
                ghost = await bob.request(method, path.replace(chat_id, "never-existed"), **kwargs)
                assert error["message"].replace(chat_id, "ID") == ghost.json()["error"]["message"].replace(
                    "never-existed", "ID"
                ), (method, path)
            for method, path, kwargs in run_requests(chat_id):
                assert_error(await bob.request(method, path, **kwargs), 404, "not_found")
            latest = await live.rt.store.latest_run(ALICE, chat_id)
            assert latest is not None
            for method, path, kwargs in response_requests(chat_id, latest.id):
                assert_error(await bob.request(method, path, **kwargs), 404, "not_found")

        assert await chat_ids(bob) == []  # bob's attempts created nothing, and alice's chats are not listed
        assert len(provider.requests) == model_calls  # none of bob's requests reached the model
        after = {c: await snapshot(live, ALICE, alice, c) for c in (native_chat, openai_chat)}
        assert after == before
        assert sorted(await chat_ids(alice)) == sorted([native_chat, openai_chat])


async def test_a_chat_id_the_caller_makes_up_is_a_404_like_another_tenants(live: Live, provider: FakeProvider) -> None:
    """New chats get their id from the server; an id a client chooses confirms nothing about anybody's chats."""
    provider.enqueue(Reply(text="bob's answer"))
    async with live.client("alice") as alice, live.client("bob") as bob:
        bobs = (await native_run(bob, "bob's chat"))["chat_id"]
        for method, path, kwargs in run_requests(bobs):
            taken = assert_error(await alice.request(method, path, **kwargs), 404, "not_found")
            free = json.loads(json.dumps(kwargs).replace(bobs, "free-id"))
            made_up = assert_error(await alice.request(method, path, **free), 404, "not_found")
            assert taken["message"].replace(bobs, "ID") == made_up["message"].replace("free-id", "ID"), path
        assert await chat_ids(alice) == [] and len(provider.requests) == 1  # nothing was created, nothing ran
        provider.enqueue(Reply(text="a new chat"), Reply(text="the same chat"))
        first = await alice.post("/v1/chat/completions", json={"model": "chat", "messages": says("new")})
        chat_id = first.headers["x-chat-id"]  # the server's id for the new chat, which continues under it
        again = await alice.post("/v1/chat/completions", json={"model": "chat", "messages": says("more")},
                                 headers={"X-Chat-Id": chat_id})  # fmt: skip
        assert again.status_code == 200 and again.headers["x-chat-id"] == chat_id
        assert await chat_ids(alice) == [chat_id]


async def test_another_tenant_cannot_cancel_or_append_to_a_running_chat(live: Live, provider: FakeProvider) -> None:
    provider.enqueue(Reply(text="w" * 90, chunk_size=3, delay_s=0.02))
    body = {"messages": says("a long answer please")}
    events: list[dict[str, Any]] = []
    async with live.client("alice") as alice, live.client("bob") as bob:
        async with alice.stream("POST", "/api/assistants/chat/runs", json=body) as response:
            chat_id = response.headers["x-chat-id"]
            async for line in response.aiter_lines():
                if not line.startswith("data: "):
                    continue
                events.append(json.loads(line[6:]))
                if events[-1]["type"] == "message_delta" and sum(e["type"] == "message_delta" for e in events) == 1:
                    assert_error(await bob.post(f"/api/chats/{chat_id}/cancel"), 404, "not_found")
                    appended = await bob.post(f"/api/chats/{chat_id}/append", json={"messages": says("injected")})
                    assert_error(appended, 404, "not_found")
                    assert_error(await bob.get(f"/api/chats/{chat_id}/messages"), 404, "not_found")
                    assert live.runs.process.running(ALICE, chat_id)  # it was running all along
        stored = (await alice.get(f"/api/chats/{chat_id}/messages")).json()["messages"]
    assert (events[-1]["status"], events[-1]["reason"]) == ("completed", "completed")  # not cancelled by bob
    assert [(m["role"], m["content"]) for m in stored] == [("user", "a long answer please"), ("assistant", "w" * 90)]
    assert all("injected" not in json.dumps(r.messages) for r in provider.requests)


@pytest.mark.parametrize(
    "intruder",
    [Identity("carol", "acme"), Identity("bob"), Identity("bob", "beta")],
    ids=["same-team-other-user", "same-user-no-team", "same-user-other-team"],
)
async def test_a_chat_belongs_to_one_user_and_team_pair(live: Live, provider: FakeProvider, intruder: Identity) -> None:
    """The current rule (store/chats.py): a chat is owned by (user_id, team_id); a team does not share chats."""
    token = await live.rt.store.create_token(OPERATOR, intruder)
    provider.enqueue(Reply(text="for bob only"))
    async with live.client("bob") as bob, client_for(live, token) as other:
        chat_id = (await native_run(bob, "bob's secret"))["chat_id"]
        for method, path, kwargs in chat_requests(chat_id) + run_requests(chat_id):
            assert_error(await other.request(method, path, **kwargs), 404, "not_found")
        assert chat_id not in await chat_ids(other)
        messages = (await bob.get(f"/api/chats/{chat_id}/messages")).json()["messages"]
    assert [m["content"] for m in messages] == ["bob's secret", "for bob only"]  # the owner still reads it, intact
    assert len(provider.requests) == 1


# --- assistants with access rules ---------------------------------------------------------------------


async def test_a_team_assistant_is_invisible_and_refused_outside_the_team(live: Live, provider: FakeProvider) -> None:
    async with live.client("alice") as alice, live.client("bob") as bob:
        assert [a["id"] for a in (await alice.get("/api/assistants")).json()["assistants"]] == ["chat"]
        assert [m["id"] for m in (await alice.get("/v1/models")).json()["data"]] == ["chat"]
        refused = [
            await alice.post("/api/assistants/private/runs?stream=false", json={"messages": says("let me in")}),
            await alice.post("/api/assistants/private/runs", json={"messages": says("let me in")}),
            await alice.post("/v1/chat/completions", json={"model": "private", "messages": says("let me in")}),
            await alice.post(
                "/v1/chat/completions", json={"model": "private", "messages": says("let me in"), "stream": True}
            ),
        ]
        for response in refused:  # refused as if it did not exist, naming only what alice may use
            assert assert_error(response, 404, "not_found")["message"] == "unknown assistant 'private' (known: chat)"
        for model in ("nobody", "privat"):  # a typo or a guess must not reveal it either
            guessed = await alice.post("/v1/chat/completions", json={"model": model, "messages": says("x")})
            assert "private" not in assert_error(guessed, 404, "not_found")["message"]
        assert await chat_ids(alice) == [] and provider.requests == []  # refused before anything existed

        assert sorted(a["id"] for a in (await bob.get("/api/assistants")).json()["assistants"]) == ["chat", "private"]
        assert sorted(m["id"] for m in (await bob.get("/v1/models")).json()["data"]) == ["chat", "private"]
        provider.enqueue(Reply(text="private native"), Reply(text="private openai"))
        ran = await bob.post("/api/assistants/private/runs?stream=false", json={"messages": says("hi")})
        assert ran.status_code == 200 and ran.json()["messages"][-1]["content"] == "private native"
        done = await bob.post("/v1/chat/completions", json={"model": "private", "messages": says("hi")})
        assert done.status_code == 200 and done.json()["choices"][0]["message"]["content"] == "private openai"


# --- role settings ------------------------------------------------------------------------------------


async def reply_to(client: httpx.AsyncClient, text: str) -> str:
    return (await native_run(client, text))["messages"][-1]["content"]


async def roles_stored(live: Live) -> dict[str, tuple[str, ...]]:
    return {f"{s.scope_kind}:{s.scope_id}/{s.role}": s.connectors for s in await live.rt.store.list_roles(OPERATOR)}


async def test_role_settings_land_on_the_callers_team_or_user_scope(live: Live, provider: FakeProvider) -> None:
    """`chat` uses role `default` (app.yml: fake.model, which says "Hello world"); demo.echo echoes."""
    async with live.client("alice") as alice, live.client("bob_admin") as bob, live.client("carol") as carol:
        set_by_bob = await bob.put("/api/roles/default", json={"connector": "demo.echo"})
        assert set_by_bob.status_code == 200, set_by_bob.text
        assert set_by_bob.json() == {"role": "default", "scope": "team:acme", "connectors": ["demo.echo"]}
        assert await roles_stored(live) == {"team:acme/default": ("demo.echo",)}
        assert await reply_to(carol, "hi from carol") == "echo: hi from carol"  # bob's team setting is carol's too
        assert await reply_to(alice, "hi from alice") == "Hello world"  # and not alice's

        set_by_alice = await alice.put("/api/roles/default", json={"connectors": ["demo.echo", "fake.model"]})
        assert set_by_alice.json() == {
            "role": "default",
            "scope": "user:alice",
            "connectors": ["demo.echo", "fake.model"],
        }
        assert await reply_to(alice, "alice again") == "echo: alice again"

        reset_by_bob = await bob.put("/api/roles/default", json={"connectors": ["fake.model"]})
        assert reset_by_bob.json()["scope"] == "team:acme"
        assert await reply_to(carol, "carol again") == "Hello world"
        assert await reply_to(alice, "alice once more") == "echo: alice once more"  # bob never touched alice's scope
    assert await roles_stored(live) == {
        "team:acme/default": ("fake.model",),
        "user:alice/default": ("demo.echo", "fake.model"),
    }


async def listed(client: httpx.AsyncClient) -> tuple[str, dict[str, list[str]]]:
    """GET /api/roles: (its scope, {role: connectors}), checking the shape of each setting."""
    response = await client.get("/api/roles")
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {"scope", "roles", "app_roles"}
    assert body["app_roles"] == [{"role": "default", "connectors": ["fake.model"]}]  # app.yml's, for everyone
    assert all(set(s) == {"role", "connectors", "updated_at"} and s["updated_at"].endswith("Z") for s in body["roles"])
    return body["scope"], {s["role"]: s["connectors"] for s in body["roles"]}


async def test_each_tenant_lists_and_removes_only_its_own_role_settings(live: Live) -> None:
    async with (
        live.client("alice") as alice,
        live.client("bob_admin") as bob,
        live.client("carol") as carol,
        live.client("bob") as member,
    ):
        assert await listed(alice) == ("user:alice", {})
        chain = {"connectors": ["demo.echo", "fake.model"]}
        assert (await bob.put("/api/roles/default", json=chain)).status_code == 200
        assert (await bob.put("/api/roles/light", json={"connector": "demo.echo"})).status_code == 200
        assert (await alice.put("/api/roles/light", json={"connector": "fake.model"})).status_code == 200
        team = {"default": ["demo.echo", "fake.model"], "light": ["demo.echo"]}
        assert await listed(bob) == await listed(carol) == await listed(member) == ("team:acme", team)
        assert await listed(alice) == ("user:alice", {"light": ["fake.model"]})

        refused = await alice.delete("/api/roles/default")  # the team's setting: not alice's to see or remove
        assert_error(refused, 404, "not_found")
        assert "default" in refused.json()["error"]["message"] and "acme" not in refused.json()["error"]["message"]
        removed = await alice.delete("/api/roles/light")
        assert (removed.status_code, removed.json()) == (200, {"role": "light", "scope": "user:alice", "deleted": True})
        assert await roles_stored(live) == {"team:acme/default": ("demo.echo", "fake.model"),
                                            "team:acme/light": ("demo.echo",)}  # fmt: skip

        assert_error(await carol.delete("/api/roles/light"), 403, "forbidden")  # a member: the team's is not hers
        assert (await bob.delete("/api/roles/light")).json()["scope"] == "team:acme"  # the team's admin
        assert_error(await bob.delete("/api/roles/light"), 404, "not_found")  # gone already
        assert_error(await bob.delete("/api/roles/has%20space"), 404, "not_found")  # no such role can be set
        assert await listed(bob) == ("team:acme", {"default": ["demo.echo", "fake.model"]})
        assert await listed(alice) == ("user:alice", {})
    assert await roles_stored(live) == {"team:acme/default": ("demo.echo", "fake.model")}


@pytest.mark.parametrize(
    ("path", "body", "mentions"),
    [
        ("/api/roles/light", {"connector": "nope"}, ["'nope'", "fake.model", "demo.echo"]),
        ("/api/roles/light", {"connectors": ["demo.echo", "nope"]}, ["'nope'", "fake.model", "demo.echo"]),
        ("/api/roles/light", {"connector": "demo.echo", "connectors": ["fake.model"]}, []),
        ("/api/roles/light", {"connectors": []}, []),
        ("/api/roles/light", {"connector": ""}, []),
        ("/api/roles/light", {}, []),
        ("/api/roles/light", {"connector": None}, []),
        ("/api/roles/light", {"connector": 7}, ["connector"]),
        ("/api/roles/light", {"connector": ["demo.echo"]}, ["connector"]),
        ("/api/roles/light", {"connectors": "demo.echo"}, ["connectors"]),
        ("/api/roles/light", {"connectors": [1, 2]}, ["connectors"]),
        ("/api/roles/light", {"connectors": [{"id": "demo.echo"}]}, ["connectors"]),
        ("/api/roles/light", {"connector": "demo.echo", "scope": "team:acme"}, ["scope"]),
        ("/api/roles/light", [{"connector": "demo.echo"}], []),
        ("/api/roles/light", "demo.echo", []),
        ("/api/roles/has%20space", {"connector": "demo.echo"}, ["role"]),
        ("/api/roles/" + "r" * 129, {"connector": "demo.echo"}, ["role"]),
        ("/api/roles/nul%00", {"connector": "demo.echo"}, ["role"]),
    ],
)
async def test_bad_role_settings_are_a_400_and_store_nothing(
    live: Live, path: str, body: object, mentions: list[str]
) -> None:
    async with live.client("bob_admin") as bob, live.client("alice") as alice:
        for client in (bob, alice):
            error = assert_error(await client.put(path, json=body), 400, "invalid_request")
            for word in mentions:
                assert word in error["message"], error
    assert await roles_stored(live) == {}


# --- authentication -------------------------------------------------------------------------------------

CHAT = "{chat_id}"  # alice's chat: the tests below create it and put its id in place of this
ROUTES: list[tuple[str, str, Any]] = [
    ("POST", "/v1/chat/completions", {"model": "chat", "messages": says("hi")}),
    ("GET", "/v1/models", None),
    ("POST", "/api/assistants/chat/runs", {"messages": says("hi")}),
    ("POST", "/api/assistants/chat/runs?stream=false", {"messages": says("hi"), "chat_id": CHAT}),
    ("POST", f"/api/chats/{CHAT}/cancel", None),
    ("POST", f"/api/chats/{CHAT}/append", {"messages": says("more")}),
    ("GET", "/api/chats", None),
    ("GET", f"/api/chats/{CHAT}/messages", None),
    ("GET", f"/api/chats/{CHAT}/messages?versions=true", None),
    ("POST", f"/api/chats/{CHAT}/regenerate?stream=false", None),
    ("POST", f"/api/chats/{CHAT}/edit?stream=false", {"message_id": "msg_1", "content": "changed"}),
    ("GET", f"/api/chats/{CHAT}/resume", None),
    ("POST", f"/api/chats/{CHAT}/resume", None),
    ("GET", f"/api/chats/{CHAT}/approvals", None),
    ("POST", f"/api/chats/{CHAT}/approvals", {"decisions": [{"tool_call_id": "t1", "approve": True}]}),
    ("GET", f"/api/chats/{CHAT}/runs/run_1", None),
    ("PATCH", f"/api/chats/{CHAT}", {"title": "renamed"}),
    ("DELETE", f"/api/chats/{CHAT}", None),
    ("GET", "/api/assistants", None),
    ("PUT", "/api/roles/default", {"connector": "demo.echo"}),
    ("GET", "/api/roles", None),
    ("DELETE", "/api/roles/default", None),
    ("GET", "/api/usage?from=2026-01-01&by=assistant", None),
    ("GET", "/api/budgets", None),
    ("PUT", "/api/budgets", {"per_day": 5}),
    ("GET", "/api/app", None),
    ("GET", "/api/audit", None),
    ("GET", "/api/knowledge", None),
    ("POST", "/api/knowledge", {"name": "mine"}),
    ("GET", "/api/knowledge/handbook/documents", None),
    ("POST", "/api/knowledge/handbook/documents", {"title": "planted", "text": "planted"}),
    ("DELETE", "/api/knowledge/handbook/documents/doc_1", None),
    ("POST", "/api/knowledge/handbook/search", {"query": "anything"}),
    ("POST", "/v1/embeddings", {"input": "anything"}),
    ("POST", "/v1/messages", {"model": "chat", "max_tokens": 100, "messages": says("hi")}),
    ("POST", "/v1/responses", {"model": "chat", "input": "hi"}),
    ("GET", f"/v1/responses/resp_run_1.{CHAT}", None),
    ("GET", "/api/tokens", None),
    ("POST", "/api/tokens", {"user": "mallory"}),
    ("DELETE", "/api/tokens/tok_1", None),
]
PUBLIC = {("GET", "/healthz"), ("GET", "/readyz"), ("GET", "/")}


def bad_authorizations(valid: str, revoked: str, expired: str) -> dict[str, str | None]:
    return {
        "missing": None,
        "empty": "",
        "scheme only": "Bearer",
        "two tokens": f"Bearer {valid} {valid}",
        "basic auth": "Basic YWxpY2U6c2VjcmV0",
        "valid token, other scheme": f"Token {valid}",
        "valid token, no scheme": valid,
        "unknown token": "Bearer ya_not-a-token-anybody-was-given",
        "valid token plus a byte": f"Bearer {valid}x",
        "revoked token": f"Bearer {revoked}",
        "expired token": f"Bearer {expired}",
    }


def on_chat(chat_id: str, path: str, body: Any) -> tuple[str, Any]:
    return path.replace(CHAT, chat_id), json.loads(json.dumps(body).replace(CHAT, chat_id))


@pytest.mark.parametrize(("method", "path", "body"), ROUTES, ids=[f"{m} {p}" for m, p, _ in ROUTES])
async def test_every_route_needs_a_valid_token(
    live: Live, provider: FakeProvider, method: str, path: str, body: Any
) -> None:
    async with live.client("alice") as alice:
        chat_id = (await native_run(alice, "alice's first words"))["chat_id"]
        path, body = on_chat(chat_id, path, body)
        revoked = await live.rt.store.create_token(OPERATOR, ALICE, label="soon revoked")
        probe = await alice.get("/api/chats", headers={"Authorization": f"Bearer {revoked}"})
        assert probe.status_code == 200  # it worked until it was revoked
        assert await live.rt.store.revoke_token(OPERATOR, revoked) == 1
        expired = await live.rt.store.create_token(OPERATOR, ALICE, expires_at=live.rt.clock() - 1)
        before = await snapshot(live, ALICE, alice, chat_id)
    calls = len(provider.requests)
    async with httpx.AsyncClient(base_url=live.url, timeout=30) as anonymous:
        for name, header in bad_authorizations(live.tokens["alice"], revoked, expired).items():
            headers = {} if header is None else {"Authorization": header}
            response = await anonymous.request(method, path, json=body, headers=headers)
            assert "authorization" not in anonymous.headers
            error = assert_error(response, 401, "unauthorized")
            assert response.headers.get("www-authenticate") == "Bearer", name
            assert all(secret not in error["message"] for secret in (live.tokens["alice"], revoked, expired))
    async with live.client("alice") as alice:
        assert await snapshot(live, ALICE, alice, chat_id) == before
        assert await chat_ids(alice) == [chat_id]
    assert len(provider.requests) == calls and await roles_stored(live) == {}
    assert await live.rt.store.list_budgets(OPERATOR) == []  # no budget was set either


BODIES: dict[str, bytes | list[bytes]] = {
    "malformed JSON": b"{not json",
    "wrong types": json.dumps({"messages": 7, "model": [], "connector": {}}).encode(),
    "not JSON at all": b"\xff\xfe\x00 binary",
    "over the size limit": json.dumps({"messages": says("x" * 70_000)}).encode(),
    "over the limit, undeclared": [b'{"messages": [{"role": "user", "content": "', b"x" * 70_000, b'"}]}'],
}


@pytest.mark.parametrize(("method", "path", "body"), ROUTES, ids=[f"{m} {p}" for m, p, _ in ROUTES])
async def test_without_a_valid_token_the_answer_is_401_whatever_the_body(
    live: Live, method: str, path: str, body: Any
) -> None:
    """The token is checked first: a bad body (or one too big to read) tells an anonymous caller nothing else."""
    del body  # the route's own body is replaced by the bad ones below
    async with httpx.AsyncClient(base_url=live.url, timeout=30) as anonymous:
        for name, raw in BODIES.items():
            for header in (None, "Bearer ya_not-a-token-anybody-was-given"):
                headers = {"Content-Type": "application/json", **({"Authorization": header} if header else {})}
                content = chunked(raw) if isinstance(raw, list) else raw
                response = await anonymous.request(method, path, content=content, headers=headers)
                assert response.status_code == 401, (name, header, response.text)
                assert_error(response, 401, "unauthorized")
    assert await chat_ids_of(live, ALICE) == []


async def chunked(parts: list[bytes]) -> AsyncIterator[bytes]:
    """A body sent in pieces, with no Content-Length to refuse it by."""
    for part in parts:
        yield part


async def chat_ids_of(live: Live, who: Identity) -> list[str]:
    return [c.id for c in await live.rt.store.list_chats(who)]


async def test_the_route_list_above_is_every_route_of_the_api(live: Live) -> None:
    """A new route must join ROUTES (and so the 401 test), or be deliberately public."""
    async with live.client("") as anonymous:
        document = (await anonymous.get("/openapi.json")).json()
        health, page = await anonymous.get("/healthz"), await anonymous.get("/")
    declared = {(m.upper(), p) for p, ops in document["paths"].items() for m in ops}
    tested = {(m, p.split("?")[0].replace(CHAT, "{chat_id}")) for m, p, _ in ROUTES}
    tested = {(m, p.replace("/chat/runs", "/{assistant_id}/runs").replace("/default", "/{role}")) for m, p in tested}
    tested = {(m, p.replace("/runs/run_1", "/runs/{run_id}")) for m, p in tested}
    tested = {(m, p.replace("/responses/resp_run_1.{chat_id}", "/responses/{response_id}")) for m, p in tested}
    tested = {(m, p.replace("/handbook/", "/{collection_id}/").replace("/doc_1", "/{document_id}")) for m, p in tested}
    tested = {(m, p.replace("/tok_1", "/{token_id}")) for m, p in tested}
    assert declared - PUBLIC == tested
    assert (health.status_code, health.json()) == (200, {"status": "ok"})
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")


# --- the identity is the token's, whatever the body says ----------------------------------------------

POSING = {"user_id": "bob", "team_id": "acme"}
POSING_HEADERS = {"X-User-Id": "bob", "X-Team-Id": "acme"}


async def test_native_bodies_naming_an_identity_are_refused(live: Live, provider: FakeProvider) -> None:
    async with client_for(live, live.tokens["alice"], **POSING_HEADERS) as alice:
        attempts = [
            await alice.post("/api/assistants/private/runs?stream=false", json={"messages": says("x"), **POSING}),
            await alice.post("/api/assistants/chat/runs?stream=false", json={"messages": says("x"), **POSING}),
            await alice.post("/api/assistants/chat/runs", json={"messages": says("x"), "user_id": "bob"}),
            await alice.put("/api/roles/default", json={"connector": "demo.echo", **POSING}),
        ]
        for response in attempts:
            error = assert_error(response, 400, "invalid_request")
            assert "user_id" in error["message"] or "team_id" in error["message"], error
        # metadata is free-form and is only metadata: the run is still alice's, and `private` still refused
        denied = await alice.post(
            "/api/assistants/private/runs?stream=false", json={"messages": says("x"), "metadata": POSING}
        )
        assert_error(denied, 404, "not_found")
        chat_id = (await native_run(alice, "mine", metadata=POSING))["chat_id"]
        assert await chat_ids(alice) == [chat_id]
    assert await roles_stored(live) == {}
    async with live.client("bob") as bob:
        assert await chat_ids(bob) == []
        assert_error(await bob.get(f"/api/chats/{chat_id}/messages"), 404, "not_found")
    assert len(provider.requests) == 1


async def test_openai_bodies_naming_an_identity_change_nothing(live: Live, provider: FakeProvider) -> None:
    """`user_id` and `team_id` are no fields of OpenAI's: refused, as any unknown field. OpenAI's `user` is the
    run's metadata only, as `metadata` is: neither changes whose run it is."""
    async with client_for(live, live.tokens["alice"], **POSING_HEADERS) as alice:
        for field in POSING:
            refused = await alice.post("/v1/chat/completions", json={"model": "chat", "messages": says("x"),
                                                                      field: POSING[field]})  # fmt: skip
            assert assert_error(refused, 400, "invalid_request")["param"] == field
        posing = {"user": "bob", "metadata": POSING}
        denied = await alice.post("/v1/chat/completions", json={"model": "private", "messages": says("x"), **posing})
        assert_error(denied, 404, "not_found")
        provider.enqueue(Reply(text="for alice"))
        chat_id, reply = await completion(alice, "who am i", **posing)
        assert reply == "for alice"
        assert await chat_ids(alice) == [chat_id]
    assert [m.content for m in await live.rt.store.history(ALICE, chat_id)] == ["who am i", "for alice"]
    async with live.client("bob") as bob:
        assert await chat_ids(bob) == []
        assert_error(await bob.get(f"/api/chats/{chat_id}/messages"), 404, "not_found")
        continued = await bob.post(
            "/v1/chat/completions",
            json={"model": "chat", "messages": says("let me continue"), **posing},
            headers={"X-Chat-Id": chat_id},
        )
        assert_error(continued, 404, "not_found")
    assert len(provider.requests) == 1
