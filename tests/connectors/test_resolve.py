"""`use::<role>` resolution: the four levels, per team and user, on SQLite and PostgreSQL."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.apps import make_app
from yao_agent.connectors import resolve_connectors
from yao_agent.dsl import App, load_app
from yao_agent.errors import ModelError
from yao_agent.identity import Identity
from yao_agent.store import SqlStore

SCRIPT = "type: scripted\nrules: [{reply: ok}]\n"
ALICE = Identity("alice")
BOB_AT_ACME = Identity("bob", "acme")


@pytest.fixture
def app(tmp_path: Path) -> App:
    files = {f"connectors/c/{name}.yml": SCRIPT for name in ("app_default", "app_light", "team", "user", "second")}
    files["app.yml"] = "roles:\n  default: c.app_default\n  light: c.app_light\n"
    return load_app(make_app(tmp_path, files, base={}))


async def ids(ref: str | None, app: App, who: Identity, store: SqlStore) -> tuple[tuple[str, ...], str]:
    found = await resolve_connectors(ref, app, who, store)
    return found.ids, found.level


async def test_app_role_when_nobody_set_one(app: App, store: SqlStore) -> None:
    assert await ids("use::light", app, ALICE, store) == (("c.app_light",), "app_role")


async def test_user_setting_wins_for_a_caller_without_a_team(app: App, store: SqlStore) -> None:
    await store.set_role(("user", "alice"), "light", ["c.user"])
    assert await ids("use::light", app, ALICE, store) == (("c.user",), "scoped_role")


async def test_team_setting_wins_for_a_caller_with_a_team(app: App, store: SqlStore) -> None:
    await store.set_role(("team", "acme"), "light", ["c.team"])
    assert await ids("use::light", app, BOB_AT_ACME, store) == (("c.team",), "scoped_role")


async def test_a_caller_with_a_team_ignores_user_settings(app: App, store: SqlStore) -> None:
    await store.set_role(("user", "bob"), "light", ["c.user"])
    assert await ids("use::light", app, BOB_AT_ACME, store) == (("c.app_light",), "app_role")
    await store.set_role(("team", "acme"), "light", ["c.team"])
    assert await ids("use::light", app, BOB_AT_ACME, store) == (("c.team",), "scoped_role")


async def test_one_team_never_sees_another_teams_setting(app: App, store: SqlStore) -> None:
    await store.set_role(("team", "other"), "light", ["c.team"])
    assert await ids("use::light", app, BOB_AT_ACME, store) == (("c.app_light",), "app_role")


async def test_unknown_role_falls_to_the_scoped_default_then_the_app_default(app: App, store: SqlStore) -> None:
    assert await ids("use::heavy", app, ALICE, store) == (("c.app_default",), "app_default")
    await store.set_role(("user", "alice"), "default", ["c.user"])
    assert await ids("use::heavy", app, ALICE, store) == (("c.user",), "scoped_default")


async def test_empty_and_omitted_mean_default(app: App, store: SqlStore) -> None:
    assert await ids(None, app, ALICE, store) == (("c.app_default",), "app_default")
    assert await ids("use::", app, ALICE, store) == (("c.app_default",), "app_default")


async def test_a_fallback_chain_keeps_its_order(app: App, store: SqlStore) -> None:
    await store.set_role(("team", "acme"), "light", ["c.team", "c.second", "c.app_light"])
    assert await ids("use::light", app, BOB_AT_ACME, store) == (("c.team", "c.second", "c.app_light"), "scoped_role")


async def test_explicit_id_is_that_connector(app: App, store: SqlStore) -> None:
    await store.set_role(("user", "alice"), "default", ["c.user"])
    assert await ids("c.second", app, ALICE, store) == (("c.second",), "explicit")


async def test_explicit_unknown_id_is_an_error_never_a_substitute(app: App, store: SqlStore) -> None:
    with pytest.raises(ModelError) as caught:
        await resolve_connectors("c.nope", app, ALICE, store)
    assert str(caught.value) == (
        "connector 'c.nope' names unknown connector 'c.nope' "
        "(known: c.app_default, c.app_light, c.second, c.team, c.user)"
    )


async def test_nothing_anywhere_is_the_exact_error(tmp_path: Path, store: SqlStore) -> None:
    app = load_app(make_app(tmp_path, {"connectors/c/x.yml": SCRIPT, "app.yml": "history_size: 5\n"}, base={}))
    with pytest.raises(ModelError) as caught:
        await resolve_connectors("use::light", app, ALICE, store)
    assert str(caught.value) == 'no connector resolved for role "light"'
    assert caught.value.reason == "model_error"


async def test_a_setting_naming_a_removed_connector_says_so(app: App, store: SqlStore) -> None:
    await store.set_role(("team", "acme"), "light", ["c.gone"])
    with pytest.raises(ModelError, match=re.escape("role 'light' of team:acme names unknown connector 'c.gone'")):
        await resolve_connectors("use::light", app, BOB_AT_ACME, store)


# --- connector access: a tenant's settings reach only the connectors meant for it ----------------------------

ACME_BOB, GLOBEX_BOB = Identity("bob", "acme"), Identity("bob", "globex")
PREMIUM = SCRIPT + "access: {teams: [acme]}\n"


@pytest.fixture
def guarded(tmp_path: Path) -> App:
    """c.premium is acme's, c.vip acme's bob's; seven more public connectors make the app's list long."""
    files = {f"connectors/c/{name}.yml": SCRIPT for name in ("app_default", "app_light", "team")}
    files |= {f"connectors/c/more{i}.yml": SCRIPT for i in range(7)}
    files["connectors/c/premium.yml"] = PREMIUM
    files["connectors/c/vip.yml"] = SCRIPT + "access: {users: [acme/bob]}\n"
    files["app.yml"] = "roles:\n  default: c.app_default\n  light: c.app_light\n  heavy: c.premium\n"
    return load_app(make_app(tmp_path, files, base={}))


async def test_a_team_setting_naming_a_connector_the_caller_may_not_use_is_an_error(
    guarded: App, store: SqlStore
) -> None:
    """Before: globex's setting called acme's connector."""
    await store.set_role(("team", "globex"), "light", ["c.premium"])
    with pytest.raises(ModelError) as caught:
        await resolve_connectors("use::light", guarded, GLOBEX_BOB, store)
    message = "role 'light' of team:globex names connector 'c.premium', which is not available to bob@globex"
    assert str(caught.value) == message
    assert caught.value.reason == "model_error"
    await store.set_role(("team", "acme"), "light", ["c.premium"])
    assert await ids("use::light", guarded, ACME_BOB, store) == (("c.premium",), "scoped_role")


async def test_a_link_the_caller_may_not_use_is_skipped(guarded: App, store: SqlStore) -> None:
    await store.set_role(("team", "globex"), "light", ["c.premium", "c.team"])
    assert await ids("use::light", guarded, GLOBEX_BOB, store) == (("c.team",), "scoped_role")
    await store.set_role(("team", "globex"), "light", ["c.premium", "c.vip"])
    with pytest.raises(ModelError) as caught:
        await resolve_connectors("use::light", guarded, GLOBEX_BOB, store)
    assert str(caught.value) == (
        "role 'light' of team:globex names connectors 'c.premium', 'c.vip', none of which is available to bob@globex"
    )
    await store.set_role(("team", "acme"), "light", ["c.vip", "c.premium"])
    assert await ids("use::light", guarded, ACME_BOB, store) == (("c.vip", "c.premium"), "scoped_role")
    assert await ids("use::light", guarded, Identity("carol", "acme"), store) == (("c.premium",), "scoped_role")


async def test_app_roles_and_an_assistants_own_connector_apply_as_written(guarded: App, store: SqlStore) -> None:
    """app.yml and assistant.yml are the operator's: their choices are not the tenant's to be refused."""
    assert await ids("use::heavy", guarded, GLOBEX_BOB, store) == (("c.premium",), "app_role")
    assert await ids("c.premium", guarded, GLOBEX_BOB, store) == (("c.premium",), "explicit")


async def test_a_connector_chosen_at_run_time_must_admit_the_caller(guarded: App, store: SqlStore) -> None:
    """What a hook chooses (from_app=False) may come from the request: one meant for others is unknown to them."""
    found = await resolve_connectors("c.premium", guarded, ACME_BOB, store, from_app=False)
    assert found.ids == ("c.premium",)
    with pytest.raises(ModelError) as caught:
        await resolve_connectors("c.premium", guarded, GLOBEX_BOB, store, from_app=False)
    assert str(caught.value) == (
        "connector 'c.premium' names unknown connector 'c.premium' "
        "(known: c.app_default, c.app_light, c.more0, c.more1, c.more2, … 5 more)"
    )


async def test_an_unknown_connector_error_names_only_a_few_the_caller_may_use(guarded: App, store: SqlStore) -> None:
    await store.set_role(("team", "globex"), "light", ["c.gone"])
    with pytest.raises(ModelError) as caught:
        await resolve_connectors("use::light", guarded, GLOBEX_BOB, store)
    assert str(caught.value) == (
        "role 'light' of team:globex names unknown connector 'c.gone' "
        "(known: c.app_default, c.app_light, c.more0, c.more1, c.more2, … 5 more)"
    )
    assert "premium" not in str(caught.value)
