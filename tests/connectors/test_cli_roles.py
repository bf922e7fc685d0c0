"""`yao-agent roles set/list/unset` as an operator uses them."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from tests.support.apps import make_app
from yao_agent.cli import main

FILES = {
    "app.yml": "roles:\n  default: demo.echo\n",
    "connectors/demo/echo.yml": "type: scripted\nrules: [{reply: hi}]\n",
    "connectors/demo/other.yml": "type: scripted\nrules: [{reply: hey}]\n",
}


def cli(app: Path, *args: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(["--app", str(app), *args], out=out)
    return code, out.getvalue()


def test_set_then_list_shows_the_setting(tmp_path: Path) -> None:
    app = make_app(tmp_path, FILES)
    assert cli(app, "roles", "set", "light", "demo.echo", "--team", "acme") == (
        0,
        "role light for team acme: demo.echo\n",
    )
    assert cli(app, "roles", "set", "heavy", "demo.other", "demo.echo", "--user", "u1")[0] == 0
    code, listing = cli(app, "roles", "list")
    assert code == 0
    rows = [line.split() for line in listing.splitlines()]
    assert ["app.yml", "default", "demo.echo"] in rows
    assert ["team:acme", "light", "demo.echo"] in rows
    assert ["user:u1", "heavy", "demo.other", "→", "demo.echo"] in rows
    assert (tmp_path / ".yao" / "agent.db").is_file()  # the app's own store, under the app


def test_setting_an_unknown_connector_is_refused_with_the_known_ids(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    app = make_app(tmp_path, FILES)
    assert cli(app, "roles", "set", "light", "demo.ecko", "--team", "acme")[0] == 2
    assert capsys.readouterr().err == (
        "error: unknown connector 'demo.ecko' (did you mean 'demo.echo'? known: demo.echo, demo.other)\n"
    )
    assert "team:acme" not in cli(app, "roles", "list")[1]


def test_a_scope_is_required(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    app = make_app(tmp_path, FILES)
    assert cli(app, "roles", "set", "light", "demo.echo")[0] == 2
    assert "give --team T or --user U" in capsys.readouterr().err


def test_unset_removes_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    app = make_app(tmp_path, FILES)
    cli(app, "roles", "set", "light", "demo.echo", "--user", "u1")
    assert cli(app, "roles", "unset", "light", "--user", "u1")[0] == 0
    assert "user:u1" not in cli(app, "roles", "list")[1]
    assert cli(app, "roles", "unset", "light", "--user", "u1")[0] == 2
    assert "role light is not set for user u1" in capsys.readouterr().err


def test_db_flag_points_elsewhere(tmp_path: Path) -> None:
    app = make_app(tmp_path / "app", FILES)
    other = tmp_path / "elsewhere.db"
    assert cli(app, "--db", f"sqlite:///{other}", "roles", "set", "light", "demo.echo", "--team", "t")[0] == 0
    assert other.is_file()
    assert "team:t" not in cli(app, "roles", "list")[1]


def test_a_connector_nobody_of_the_scope_may_use_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every run of that scope would refuse it (its `access`), so the operator hears it when setting it."""
    app = make_app(tmp_path, {**FILES, "connectors/demo/premium.yml": (
        "type: scripted\nrules: [{reply: rich}]\naccess: {teams: [acme], users: [globex/bob]}\n"
    )})  # fmt: skip
    assert cli(app, "roles", "set", "heavy", "demo.premium", "--team", "initech")[0] == 2
    assert capsys.readouterr().err == (
        "error: connector 'demo.premium' is not available to team initech "
        "(its access admits teams: acme; users: globex/bob)\n"
    )
    assert cli(app, "roles", "set", "heavy", "demo.premium", "--user", "bob")[0] == 2  # bob without a team
    assert "not available to user bob" in capsys.readouterr().err
    assert cli(app, "roles", "set", "heavy", "demo.other", "demo.premium", "--team", "initech")[0] == 2
    assert "heavy" not in cli(app, "roles", "list")[1]
    for team in ("acme", "globex"):  # globex: its bob may use it, so the setting is useful there
        assert cli(app, "roles", "set", "heavy", "demo.premium", "--team", team)[0] == 0
