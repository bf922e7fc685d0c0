"""`access` on assistants and connectors: whom an entry admits, and what `yao-agent validate` refuses.

A user id is scoped by its team (two teams may each have a `bob`), so `users:` entries are whole
identities: `acme/bob` is bob of acme, a bare `bob` is the user bob without a team.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from tests.support.apps import make_app
from yao_agent.cli import main
from yao_agent.dsl import load_app
from yao_agent.dsl.specs import Access

ECHO = "type: scripted\nrules: [{reply: hi}]\n"
ACME_BOB, GLOBEX_BOB, BARE_BOB, ACME_CAROL = ("bob", "acme"), ("bob", "globex"), ("bob", None), ("carol", "acme")


def access_of(tmp_path: Path, access: str) -> tuple[Access, Access]:
    """The access an assistant and a connector get from the same `access:` text."""
    app = make_app(tmp_path, {
        "assistants/chat/assistant.yml": f"name: Chat\naccess: {access}\n",
        "connectors/demo/premium.yml": f"{ECHO}access: {access}\n",
    })  # fmt: skip
    loaded = load_app(app)
    return loaded.assistants["chat"].access, loaded.connectors["demo.premium"].access


def admitted(access: Access) -> set[tuple[str, str | None]]:
    return {who for who in (ACME_BOB, GLOBEX_BOB, BARE_BOB, ACME_CAROL) if access.allows(*who)}


@pytest.mark.parametrize(
    ("access", "who"),
    [
        ("{users: [bob]}", {BARE_BOB}),  # never acme's or globex's bob
        ("{users: [acme/bob]}", {ACME_BOB}),  # never globex's bob, nor bob without a team
        ("{users: [acme/bob, globex/bob]}", {ACME_BOB, GLOBEX_BOB}),
        ("{teams: [acme]}", {ACME_BOB, ACME_CAROL}),
        ("{teams: [globex], users: [acme/carol]}", {GLOBEX_BOB, ACME_CAROL}),
        ("{public: false, users: [bob]}", {BARE_BOB}),
        ("{public: true}", {ACME_BOB, GLOBEX_BOB, BARE_BOB, ACME_CAROL}),
    ],
)
def test_a_user_entry_admits_one_identity_of_one_team(
    tmp_path: Path, access: str, who: set[tuple[str, str | None]]
) -> None:
    for parsed in access_of(tmp_path, access):
        assert admitted(parsed) == who


def test_no_access_is_public_for_assistants_and_connectors(tmp_path: Path) -> None:
    app = load_app(make_app(tmp_path, {"connectors/demo/premium.yml": ECHO}))
    for spec in (app.assistants["chat"], app.connectors["demo.premium"]):
        assert admitted(spec.access) == {ACME_BOB, GLOBEX_BOB, BARE_BOB, ACME_CAROL}


def test_what_a_role_setting_of_a_scope_can_reach() -> None:
    """`roles set --team T` needs a connector some member of T may use; `--user U`, one bare U may use."""
    team_member = Access(public=False, users=frozenset({"acme/bob"}))
    assert team_member.reaches("team", "acme") and not team_member.reaches("team", "globex")
    assert not team_member.reaches("user", "bob")  # the bare user bob is not acme's bob
    assert Access(public=False, users=frozenset({"bob"})).reaches("user", "bob")
    assert Access(public=False, teams=frozenset({"acme"})).reaches("team", "acme")
    assert Access().reaches("team", "anyone") and Access().reaches("user", "anyone")


def validate(app: Path) -> tuple[int, list[str]]:
    out = io.StringIO()
    code = main(["--app", str(app), "validate"], out=out)
    return code, out.getvalue().splitlines()


USERS_HINT = (
    "(expected team/user for a member of a team (e.g. acme/bob), or a bare user id for a user without a team "
    "(e.g. local))"
)


@pytest.mark.parametrize("kind", ["assistant", "connector"])
@pytest.mark.parametrize(
    ("access", "error"),
    [
        ("{users: [a/b/c]}", f"access.users[0]: 'a/b/c' is not a valid value {USERS_HINT}"),
        ("{users: [/bob]}", f"access.users[0]: '/bob' is not a valid value {USERS_HINT}"),
        ("{users: [acme/]}", f"access.users[0]: 'acme/' is not a valid value {USERS_HINT}"),
        ("{users: ['']}", f"access.users[0]: '' is not a valid value {USERS_HINT}"),
        ("{users: [bob smith]}", f"access.users[0]: 'bob smith' is not a valid value {USERS_HINT}"),
        (
            "{teams: [acme/bob]}",
            "access.teams[0]: 'acme/bob' is not a valid value (expected a team id of letters, digits, _.@:+- "
            "(e.g. acme))",
        ),
        ("{teams: []}", "access: admits nobody (expected public: true, or teams or users naming someone)"),
        ("{teams: [], users: []}", "access: admits nobody (expected public: true, or teams or users naming someone)"),
        ("{public: false}", "access: admits nobody (expected public: true, or teams or users naming someone)"),
        ("{}", "access: admits nobody (expected public: true, or teams or users naming someone)"),
        (
            "{public: true, teams: [acme]}",
            "access.teams: listed with public: true, which admits everyone (expected one or the other)",
        ),
        (
            "{public: true, users: [acme/bob]}",
            "access.users: listed with public: true, which admits everyone (expected one or the other)",
        ),
    ],
)
def test_validate_refuses_an_access_that_is_malformed_admits_nobody_or_contradicts_itself(
    tmp_path: Path, kind: str, access: str, error: str
) -> None:
    if kind == "assistant":
        rel, text = "assistants/chat/assistant.yml", f"name: Chat\naccess: {access}\n"
    else:
        rel, text = "connectors/demo/premium.yml", f"type: scripted\naccess: {access}\nrules: [{{reply: hi}}]\n"
    code, lines = validate(make_app(tmp_path, {rel: text}))
    assert (code, lines) == (2, [f"{rel}:2 {error}", "1 error"])


def test_validate_accepts_every_documented_form(tmp_path: Path) -> None:
    app = make_app(tmp_path, {
        "assistants/chat/assistant.yml": "name: Chat\naccess: {teams: [acme], users: [globex/bob, local]}\n",
        "assistants/open/assistant.yml": "name: Open\naccess: {public: true, teams: []}\n",
        "connectors/demo/premium.yml": f"{ECHO}access: {{public: false, users: [acme/bob.smith@x.io]}}\n",
    })  # fmt: skip
    assert validate(app) == (0, ["OK: 2 assistants, 2 connectors, 0 MCP servers"])


def test_a_run_of_an_assistant_that_admits_nobody_never_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: `teams: []` made the assistant public, and `chat` answered anybody."""
    app = make_app(tmp_path, {"assistants/chat/assistant.yml": "name: Chat\naccess: {teams: []}\n"})
    out = io.StringIO()
    assert main(["--app", str(app), "chat", "chat", "hi", "--user", "mallory", "--team", "evil"], out=out) == 2
    assert "assistants/chat/assistant.yml:2 access: admits nobody" in capsys.readouterr().err
    assert "You said" not in out.getvalue()
