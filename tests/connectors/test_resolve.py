"""`use::<role>` resolution: the four levels, per team and user, on SQLite and PostgreSQL."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.apps import make_app
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
