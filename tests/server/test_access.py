"""Access over real HTTP, with two tenants of the same user id: bob of acme and bob of globex.

An assistant's `access.users` names whole identities (`acme/bob`), so globex's bob is never acme's.
A connector's `access` says who may reach it through what a tenant chooses (a role setting, a value a
hook takes from the request); an error a tenant provokes names only a few connectors or assistants
that tenant may use, and says nothing of the others.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.runtimes import app_files, make_runtime
from tests.support.servers import Live, assert_error, client_for, running, says
from yao_agent.identity import OPERATOR, Identity
from yao_agent.store import SqlStore
from yao_agent.testing import FakeProvider

pytestmark = pytest.mark.both_stores  # what it tests is what the database does

# Both bobs hold their team's admin token: they map their team's roles below (a member may not).
ACME_BOB, GLOBEX_BOB = Identity("bob", "acme", admin=True), Identity("bob", "globex", admin=True)
ACME_CAROL = Identity("carol", "acme")
PICKER = """
function Create(ctx) {
  if (ctx.metadata.to) return {delegate: {assistant_id: ctx.metadata.to}};
  return ctx.metadata.model ? {connector: ctx.metadata.model} : null;
}
"""
# What globex's bob may use: six public connectors besides these two, so that a full list would be long.
GLOBEX_KNOWN = "(known: c.more0, c.more1, c.more2, c.more3, c.more4, … 3 more)"


def files(base_url: str) -> dict[str, str]:
    out = app_files(base_url)
    out |= {f"connectors/c/more{i}.yml": "type: scripted\nrules: [{reply: more}]\n" for i in range(6)}
    out["connectors/demo/echo.yml"] = "type: scripted\nrules:\n  - reply: 'echo: {{ last_user }}'\n"
    out["connectors/demo/premium.yml"] = "type: scripted\nrules: [{reply: premium}]\naccess: {teams: [acme]}\n"
    out["assistants/private/assistant.yml"] = "name: Private\naccess: {teams: [acme]}\n"
    out["assistants/acme_bob/assistant.yml"] = "name: Acme's Bob\naccess: {users: [acme/bob]}\n"
    out["assistants/bare_bob/assistant.yml"] = "name: Bob alone\naccess: {users: [bob]}\n"
    out["hooks/picker.js"] = PICKER
    out["assistants/picker/assistant.yml"] = "name: Picker\nhook: hooks/picker.js\n"
    return out


@pytest.fixture
async def live(tmp_path: Path, store: SqlStore, provider: FakeProvider) -> AsyncIterator[Live]:
    async with running(make_runtime(tmp_path / "app", store, files(provider.base_url))) as served:
        for name, who in {"acme_bob": ACME_BOB, "globex_bob": GLOBEX_BOB, "acme_carol": ACME_CAROL}.items():
            served.tokens[name] = await served.rt.store.create_token(OPERATOR, who)
        yield served


def client(live: Live, name: str) -> httpx.AsyncClient:
    return client_for(live, live.tokens[name])


async def run(client: httpx.AsyncClient, assistant: str, text: str, **metadata: str) -> dict[str, Any]:
    body = {"messages": says(text), "metadata": metadata}
    response = await client.post(f"/api/assistants/{assistant}/runs?stream=false", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def reply(result: dict[str, Any]) -> str:
    assert result["status"] == "completed", result
    return result["messages"][-1]["content"]


async def listed(client: httpx.AsyncClient) -> set[str]:
    native = {a["id"] for a in (await client.get("/api/assistants")).json()["assistants"]}
    models = {m["id"] for m in (await client.get("/v1/models")).json()["data"]}
    assert native == models
    return native


async def test_a_user_entry_admits_bob_of_one_team_only(live: Live, provider: FakeProvider) -> None:
    """Before: `users: [acme/bob]` matched nobody and `users: [bob]` admitted every team's bob."""
    async with client(live, "acme_bob") as acme, client(live, "globex_bob") as globex, live.client("alice") as alice:
        assert await listed(acme) == {"chat", "picker", "private", "acme_bob"}
        assert await listed(globex) == {"chat", "picker"}
        assert await listed(alice) == {"chat", "picker"}
        assert reply(await run(acme, "acme_bob", "hi")) == "Hello world"
        for assistant in ("acme_bob", "bare_bob", "private"):
            refused = await globex.post(f"/api/assistants/{assistant}/runs", json={"messages": says("let me in")})
            error = assert_error(refused, 404, "not_found")
            assert error["message"] == f"unknown assistant '{assistant}' (known: chat, picker)"
        refused = await acme.post("/api/assistants/bare_bob/runs", json={"messages": says("me?")})
        assert_error(refused, 404, "not_found")  # bare `bob` is the bob without a team, not acme's
    assert len(provider.requests) == 1


async def roles_stored(live: Live) -> dict[str, tuple[str, ...]]:
    return {f"{s.scope_kind}:{s.scope_id}/{s.role}": s.connectors for s in await live.rt.store.list_roles(OPERATOR)}


@pytest.mark.parametrize(
    "body", [{"connector": "demo.premium"}, {"connectors": ["demo.echo", "demo.premium"]}], ids=["one", "in a chain"]
)
async def test_a_tenant_cannot_map_a_role_to_a_connector_meant_for_another_team(
    live: Live, body: dict[str, Any]
) -> None:
    """Before: globex mapped its default role to acme's connector, and its runs called it."""
    async with client(live, "globex_bob") as globex, client(live, "acme_bob") as acme:
        refused = assert_error(await globex.put("/api/roles/default", json=body), 400, "invalid_request")
        unknown = assert_error(await globex.put("/api/roles/default", json={"connector": "demo.nothing"}), 400)
        # the same answer as for a connector that does not exist: nothing tells globex that it does
        assert refused["message"] == f"unknown connector 'demo.premium' {GLOBEX_KNOWN}"
        assert unknown["message"] == f"unknown connector 'demo.nothing' {GLOBEX_KNOWN}"
        assert await roles_stored(live) == {}
        assert reply(await run(globex, "chat", "globex asks")) == "Hello world"  # app.yml's default still

        accepted = await acme.put("/api/roles/default", json=body)
        assert accepted.status_code == 200, accepted.text
    async with client(live, "acme_carol") as carol:
        assert reply(await run(carol, "chat", "carol asks")) == (
            "premium" if "connector" in body else "echo: carol asks"
        )
    assert await roles_stored(live) == {"team:acme/default": tuple(body.get("connectors", [body.get("connector")]))}


async def test_the_400_for_an_unknown_connector_names_a_handful_the_caller_may_use(live: Live) -> None:
    """Before: it listed every connector id of the app, acme's premium one included."""
    async with client(live, "acme_bob") as acme, client(live, "globex_bob") as globex:
        own = assert_error(await acme.put("/api/roles/light", json={"connector": "nope"}), 400)
        other = assert_error(await globex.put("/api/roles/light", json={"connector": "nope"}), 400)
    assert own["message"] == "unknown connector 'nope' (known: c.more0, c.more1, c.more2, c.more3, c.more4, … 4 more)"
    assert other["message"] == f"unknown connector 'nope' {GLOBEX_KNOWN}"


async def test_a_setting_naming_a_connector_not_for_the_caller_fails_the_run_or_is_skipped(
    live: Live, provider: FakeProvider
) -> None:
    """A setting made by the operator (or before the connector's access changed) never reaches it for others."""
    async with client(live, "globex_bob") as globex:
        await live.rt.store.set_role(("team", "globex"), "default", ["demo.premium"])
        failed = await run(globex, "chat", "use premium")
        assert (failed["status"], failed["reason"]) == ("failed", "model_error")
        assert failed["error"]["message"] == (
            "role 'default' of team:globex names connector 'demo.premium', which is not available to bob@globex"
        )
        await live.rt.store.set_role(("team", "globex"), "default", ["demo.premium", "demo.echo"])
        assert reply(await run(globex, "chat", "skip it")) == "echo: skip it"
    assert provider.requests == []


async def test_a_hook_choosing_the_connector_from_the_request_reaches_only_the_callers(live: Live) -> None:
    """Before: a hook that lets the client pick the model let globex call acme's connector, and its error
    for an unknown one listed every connector of the app."""
    async with client(live, "acme_bob") as acme, client(live, "globex_bob") as globex:
        assert reply(await run(acme, "picker", "pick", model="demo.premium")) == "premium"
        for model in ("demo.premium", "demo.nothing"):
            failed = await run(globex, "picker", "pick", model=model)
            assert (failed["status"], failed["reason"]) == ("failed", "hook_error")
            assert failed["error"]["message"] == f"Create chose unknown connector '{model}' {GLOBEX_KNOWN}"
        assert reply(await run(globex, "picker", "pick", model="demo.echo")) == "echo: pick"


async def test_a_delegation_to_an_assistant_the_caller_may_not_use_names_none_of_them(live: Live) -> None:
    """Before: the error confirmed the hidden assistant, or listed every assistant of the app."""
    async with client(live, "globex_bob") as globex, client(live, "acme_bob") as acme:
        for target in ("private", "acme_bob", "nope"):
            failed = await run(globex, "picker", "hand over", to=target)
            assert (failed["status"], failed["reason"]) == ("failed", "delegate_error")
            assert failed["error"]["message"] == f"unknown assistant '{target}' (known: chat, picker)"
        assert (await run(acme, "picker", "hand over", to="private"))["status"] == "completed"
