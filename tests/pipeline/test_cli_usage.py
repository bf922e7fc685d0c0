"""`yao-agent usage`, `budgets set|list` and `tokens create --admin` (CONTRACT §7, §8.2), as an operator types
them, on SQLite and PostgreSQL.

Today's runs are made with `yao-agent chat` (the loopback fake provider answers); one run of January 15th,
2026 is made by a runtime whose clock says so, on the same database. `fake.priced` has its own `pricing`
($2 in, $8 out per million tokens); `fake.model` (model `text`) has no known price.
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.support.apps import make_app
from tests.support.cli import Cli
from tests.support.runtimes import app_files, end_of, make_runtime, turn
from yao_agent.identity import Identity
from yao_agent.store import SqlStore, open_engine, store_url
from yao_agent.testing import FakeProvider, Reply

pytestmark = pytest.mark.both_stores  # what it tests is what the database does

PAST = "2026-01-15"
PRICED = "pricing: {input_per_mtok: 2.0, output_per_mtok: 8.0}\n"
FIELDS = {"key", "runs", "input_tokens", "output_tokens", "cost_usd", "unpriced_tokens"}


def files(base_url: str) -> dict[str, str]:
    out = app_files(base_url)
    out["app.yml"] += "budgets:\n  team: {per_month: 50}\n"
    out["connectors/fake/priced.yml"] = out["connectors/fake/model.yml"] + PRICED
    out["assistants/priced/assistant.yml"] = "name: Priced\nconnector: fake.priced\n"
    return out


@pytest.fixture
def cli(tmp_path: Path, threaded_provider: FakeProvider, store_raw_url: str) -> Cli:
    return Cli(make_app(tmp_path / "app", files(threaded_provider.base_url), base={}), store_raw_url)


def used(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def chat(
    cli: Cli, threaded_provider: FakeProvider, assistant: str, user: str, team: str, tokens: tuple[int, int]
) -> None:
    threaded_provider.enqueue(Reply(text="ok", usage=used(*tokens)))
    code, shown = cli("chat", assistant, f"{user} asks", "--user", user, "--team", team)
    assert code == 0, shown


def past_run(tmp_path: Path, url: str, base_url: str) -> None:
    """bob of acme's run of January 15th: 1000 tokens in and 250 out at `fake.priced`'s price ($0.004)."""

    async def work() -> None:
        store = SqlStore(await open_engine(store_url(url, tmp_path)))
        rt = make_runtime(tmp_path / "past", store, files(base_url))
        rt.clock = lambda: datetime.fromisoformat(f"{PAST}T09:00:00+00:00").timestamp()
        try:
            end = end_of(await turn(rt, "back in January", who=Identity("bob", "acme"), assistant="priced"))
            assert end.status == "completed" and end.usage["cost_usd"] == pytest.approx(0.004)
        finally:
            await rt.aclose()

    asyncio.run(work())


@pytest.fixture
def spent(cli: Cli, threaded_provider: FakeProvider, tmp_path: Path, store_raw_url: str) -> str:
    """January's run and today's: carol (priced, $0.0018) and bob (unpriced) of acme, dave of beta. Today."""
    threaded_provider.enqueue(Reply(text="then", usage=used(1000, 250)))
    past_run(tmp_path, store_raw_url, threaded_provider.base_url)
    chat(cli, threaded_provider, "priced", "carol", "acme", (500, 100))
    chat(cli, threaded_provider, "chat", "bob", "acme", (10, 5))
    chat(cli, threaded_provider, "priced", "dave", "beta", (2000, 500))
    return time.strftime("%Y-%m-%d", time.gmtime())


def report(cli: Cli, *args: str) -> dict[str, Any]:
    code, shown = cli("usage", "--json", *args)
    assert code == 0, shown
    body = json.loads(shown)
    assert set(body) == {"scope", "from", "to", "by", "rows", "total"} and set(body["total"]) == FIELDS - {"key"}
    assert all(set(row) == FIELDS for row in body["rows"])
    return body


def keyed(body: dict[str, Any]) -> dict[str, tuple[Any, ...]]:
    return {r["key"]: (r["runs"], r["input_tokens"], r["output_tokens"], pytest.approx(r["cost_usd"]),
                       r["unpriced_tokens"]) for r in body["rows"]}  # fmt: skip


def test_usage_of_a_team_by_day_assistant_connector_and_user(cli: Cli, spent: str) -> None:
    by_day = report(cli, "--team", "acme", "--from", PAST)
    assert (by_day["scope"], by_day["from"], by_day["to"], by_day["by"]) == ({"team_id": "acme"}, PAST, spent, "day")
    assert keyed(by_day) == {PAST: (1, 1000, 250, 0.004, 0), spent: (2, 510, 105, 0.0018, 15)}
    assert by_day["total"] == {"runs": 3, "input_tokens": 1510, "output_tokens": 355,
                               "cost_usd": pytest.approx(0.0058), "unpriced_tokens": 15}  # fmt: skip
    by_assistant = report(cli, "--team", "acme", "--from", PAST, "--by", "assistant")
    assert keyed(by_assistant) == {"chat": (1, 10, 5, 0.0, 15), "priced": (2, 1500, 350, 0.0058, 0)}
    by_connector = report(cli, "--team", "acme", "--from", PAST, "--by", "connector")
    assert keyed(by_connector) == {"fake.model": (1, 10, 5, 0.0, 15), "fake.priced": (2, 1500, 350, 0.0058, 0)}
    by_user = report(cli, "--team", "acme", "--from", PAST, "--by", "user")
    assert keyed(by_user) == {"bob": (2, 1010, 255, 0.004, 15), "carol": (1, 500, 100, 0.0018, 0)}
    assert by_day["total"] == by_assistant["total"] == by_connector["total"] == by_user["total"]


def test_usage_of_one_user_of_a_team_or_without_one(cli: Cli, spent: str) -> None:
    carol = report(cli, "--team", "acme", "--user", "carol")  # this month: today's run only
    assert (carol["scope"], carol["from"], carol["to"]) == ({"team_id": "acme", "user_id": "carol"}, spent[:8] + "01",
                                                            spent)  # fmt: skip
    assert keyed(carol) == {spent: (1, 500, 100, 0.0018, 0)}
    beta = report(cli, "--team", "beta", "--by", "user")
    assert keyed(beta) == {"dave": (1, 2000, 500, 0.008, 0)}
    nobody = report(cli, "--user", "carol")  # carol without a team is not acme's carol
    assert (nobody["scope"], nobody["rows"], nobody["total"]["runs"]) == ({"user_id": "carol"}, [], 0)
    assert report(cli)["scope"] == {"user_id": "local"}  # as `chat` does, by default the CLI is user local


def test_usage_by_team_is_the_whole_deployments(cli: Cli, spent: str) -> None:
    every = report(cli, "--from", PAST, "--by", "team")
    assert every["scope"] == {} and keyed(every) == {
        "acme": (3, 1510, 355, 0.0058, 15),
        "beta": (1, 2000, 500, 0.008, 0),
    }
    assert every["total"]["runs"] == 4
    assert keyed(report(cli, "--team", "beta", "--by", "team")) == {"beta": (1, 2000, 500, 0.008, 0)}
    code, shown = cli("usage", "--from", PAST, "--by", "team")
    assert code == 0 and shown.splitlines()[0] == f"usage of every team, {PAST} to {spent} (UTC), by team"


def test_usage_prints_a_table_with_its_total(cli: Cli, spent: str) -> None:
    code, shown = cli("usage", "--team", "acme", "--from", PAST, "--by", "assistant")
    assert code == 0, shown
    lines = [line.split() for line in shown.splitlines()]
    assert shown.splitlines()[0] == f"usage of team acme, {PAST} to {spent} (UTC), by assistant"
    assert lines[1] == ["assistant", "runs", "input", "tokens", "output", "tokens", "cost", "USD", "unpriced", "tokens"]
    assert lines[2:5] == [["chat", "1", "10", "5", "0.000000", "15"], ["priced", "2", "1,500", "350", "0.005800", "0"],
                          ["total", "3", "1,510", "355", "0.005800", "15"]]  # fmt: skip
    assert "unpriced tokens: calls to models whose price is unknown" in shown


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--from", "2026-13-01"], "from: expected a date as YYYY-MM-DD, got '2026-13-01'"),
        (["--to", "01/12/2026"], "to: expected a date as YYYY-MM-DD"),
        (["--from", "2026-03-02", "--to", "2026-03-01"], "from: 2026-03-02 is after to (2026-03-01)"),
        (["--team", "has space"], "invalid team id"),
        (["--user", "a/b", "--team", "acme"], "invalid user id"),
    ],
)
def test_bad_usage_options_exit_2(cli: Cli, capsys: pytest.CaptureFixture[str], args: list[str], words: str) -> None:
    assert cli("usage", *args) == (2, "")
    assert words in capsys.readouterr().err


def test_an_unknown_grouping_is_refused_by_the_parser(cli: Cli, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli("usage", "--by", "model")
    assert exited.value.code == 2 and "invalid choice: 'model'" in capsys.readouterr().err


def test_budgets_set_sets_the_operators_ceilings_and_list_shows_them_apart_from_admins_budgets(
    cli: Cli, store_raw_url: str, tmp_path: Path
) -> None:
    assert cli("budgets", "set", "--team", "acme", "--per-month", "100") == (
        0,
        "budget ceiling of team acme: per-month $100.00 (a team admin may set it lower)\n",
    )
    assert cli("budgets", "set", "--team", "acme", "--user", "carol", "--per-day", "none") == (
        0, "budget ceiling of user carol@acme: per-day no ceiling (a team admin may set it lower)\n")  # fmt: skip
    assert cli("budgets", "set", "--user", "alice", "--per-day", "0.5", "--per-month", "10")[0] == 0
    assert cli("budgets", "set", "--team", "acme", "--per-day", "2.5")[0] == 0  # per-month stays $100

    async def admin_sets() -> None:  # as PUT /api/budgets does for acme's admin: under the ceiling
        store = SqlStore(await open_engine(store_url(store_raw_url, tmp_path)))
        try:
            await store.set_budget(("team", "acme"), {"per_month": 40.0})
        finally:
            await store.aclose()

    asyncio.run(admin_sets())
    code, shown = cli("budgets", "list", "--json")
    assert code == 0
    listed = json.loads(shown)
    assert listed["defaults"] == {"team": {"per_day": None, "per_month": 50.0},
                                  "user": {"per_day": None, "per_month": None}}  # fmt: skip
    assert [{k: v for k, v in s.items() if k != "updated_at"} for s in listed["settings"]] == [
        {"scope": "team", "id": "acme", "ceiling": {"per_day": 2.5, "per_month": 100.0}, "admin": {"per_month": 40.0}},
        {"scope": "user", "id": "carol@acme", "ceiling": {"per_day": None}, "admin": {}},  # (stored as acme/carol)
        {"scope": "user", "id": "alice", "ceiling": {"per_day": 0.5, "per_month": 10.0}, "admin": {}},
    ]
    code, shown = cli("budgets", "list")
    rows = [line.split() for line in shown.splitlines()]
    assert rows[1:3] == [["app.yml:", "each", "team", "none", "$50.00"], ["app.yml:", "each", "user", "none", "none"]]
    assert rows[3][:5] == ["team:acme", "$2.50", "$100.00", "-", "$40.00"]
    assert rows[4][:5] == ["user:carol@acme", "none", "app.yml's", "-", "-"]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--per-day", "1"], "give --team T, --user U, or both"),
        (["--team", "acme"], "give --per-day and/or --per-month"),
        (["--team", "has space", "--per-day", "1"], "invalid team id"),
    ],
)
def test_bad_budget_settings_exit_2_and_set_nothing(
    cli: Cli, capsys: pytest.CaptureFixture[str], args: list[str], words: str
) -> None:
    assert cli("budgets", "set", *args) == (2, "")
    assert words in capsys.readouterr().err
    assert json.loads(cli("budgets", "list", "--json")[1])["settings"] == []


@pytest.mark.parametrize("amount", ["-1", "abc", "nan", "inf"])
def test_an_amount_that_is_no_usd_is_refused_by_the_parser(
    cli: Cli, capsys: pytest.CaptureFixture[str], amount: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli("budgets", "set", "--team", "acme", "--per-day", amount)
    assert exited.value.code == 2 and "expected USD as a number ≥ 0, or none" in capsys.readouterr().err


def test_a_budget_set_from_the_cli_refuses_the_teams_next_chat_with_exit_1(
    cli: Cli, threaded_provider: FakeProvider, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli("budgets", "set", "--team", "acme", "--per-day", "0")[0] == 0
    tomorrow = (datetime.now(UTC) + timedelta(days=1)).strftime("%Y-%m-%d")
    code, _ = cli("chat", "priced", "hello", "--user", "bob", "--team", "acme", "--chat", "refused")
    assert code == 1
    assert capsys.readouterr().err.strip() == (
        f"error: team acme spent $0.00 of its $0.00 daily budget; it resets {tomorrow}T00:00:00Z"
    )
    assert cli("history", "refused", "--user", "bob", "--team", "acme")[0] == 2  # nothing was created
    chat(cli, threaded_provider, "priced", "dave", "beta", (1, 1))  # another team is not held to acme's budget
    assert threaded_provider.requests and len(threaded_provider.requests) == 1


def test_tokens_create_admin_and_list(cli: Cli, capsys: pytest.CaptureFixture[str]) -> None:
    code, admin_token = cli("tokens", "create", "--user", "bob", "--team", "acme", "--admin")
    assert code == 0 and "bob, admin of team acme (shown once" in capsys.readouterr().err
    code, member_token = cli("tokens", "create", "--user", "carol", "--team", "acme")
    assert code == 0 and "carol, member of team acme" in capsys.readouterr().err
    assert cli("tokens", "create", "--user", "alice", "--admin") == (2, "")
    assert "--admin makes a team admin: give the team with --team T" in capsys.readouterr().err
    code, listed = cli("tokens", "list", "--json")
    rows = [json.loads(line) for line in listed.splitlines()]
    assert code == 0 and [(r["user_id"], r["team_id"], r["kind"]) for r in rows] == [
        ("bob", "acme", "admin"), ("carol", "acme", "member")]  # fmt: skip
    assert all(r["id"].startswith("tok_") and r["expires_at"] is None and r["last_used_at"] is None for r in rows)
    assert admin_token.strip() not in listed and admin_token[:12] not in listed  # never a secret, nor its start
    code, table = cli("tokens", "list")
    assert code == 0 and rows[0]["id"] in table and "admin" in table and admin_token[:12] not in table

    async def identities() -> list[Identity | None]:
        store = SqlStore(await open_engine(store_url(cli.db, cli.app)))
        try:
            return [await store.identity_for(t.strip()) for t in (admin_token, member_token)]
        finally:
            await store.aclose()

    admin, member = asyncio.run(identities())
    assert admin is not None and member is not None and (admin.admin, member.admin) == (True, False)
    assert admin == Identity("bob", "acme")  # the same person as bob's member token: the same chats


def test_tokens_create_an_operator_token_that_expires_and_revoke_it_by_id(
    cli: Cli, capsys: pytest.CaptureFixture[str]
) -> None:
    made = time.time()
    code, token = cli("tokens", "create", "--user", "ops", "--operator", "--expires-in", "12h", "--label", "on call")
    assert code == 0 and "ops, the operator (every team), valid until " in capsys.readouterr().err
    code, listed = cli("tokens", "list", "--json")
    [row] = [json.loads(line) for line in listed.splitlines()]
    assert (row["user_id"], row["team_id"], row["kind"], row["label"]) == ("ops", None, "operator", "on call")
    expires = datetime.fromisoformat(row["expires_at"]).timestamp()
    assert made + 12 * 3600 - 1 <= expires <= time.time() + 12 * 3600 and token.strip() not in listed
    assert cli("tokens", "revoke", row["id"]) == (0, "revoked\n")
    assert json.loads(cli("tokens", "list", "--json")[1])["revoked_at"] is not None
    assert cli("tokens", "revoke", row["id"]) == (2, "")  # revoked already: no active token of that id


@pytest.mark.parametrize("span", ["5x", "0d", "-1d", "3651d", "soon"])
def test_an_expiry_that_is_no_span_is_refused_by_the_parser(
    cli: Cli, capsys: pytest.CaptureFixture[str], span: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli("tokens", "create", "--user", "x", f"--expires-in={span}")
    assert exited.value.code == 2 and "expected a span such as 30d" in capsys.readouterr().err


def test_admin_and_operator_are_one_kind_or_the_other(cli: Cli, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli("tokens", "create", "--user", "x", "--team", "acme", "--admin", "--operator")
    assert exited.value.code == 2 and "not allowed with argument" in capsys.readouterr().err
