"""`yao-agent eval replay`: turns stored by real runs (the model over HTTP from the fake provider, tools from a
real MCP subprocess) played again on a changed app — the model asked again, every tool call answered
from the stored run with no server started — and each new answer compared with the old one."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import REPO
from tests.support.apps import make_app
from tests.support.cli import cli
from tests.support.runtimes import app_files
from yao_agent.identity import Identity
from yao_agent.pipeline import RunRequest
from yao_agent.service.runs import Runs
from yao_agent.testing import FakeProvider, RecordedRequest, Reply, ToolCall

USAGE = {"prompt_tokens": 1000, "completion_tokens": 500, "total_tokens": 1500}  # $0.006 at the price below
JUDGED = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}  # $0.00012 at the judge's
BETTER = "Paris is the capital of France, on the Seine."


def prefers_the_longer(request: RecordedRequest) -> Reply:
    """The judge, wherever it is shown the new answer: the longer of the two answers is the better one."""
    asked = str(request.body["messages"][-1]["content"])
    first, second = asked.split("Answer A:\n")[1].split("\n\nAnswer B:\n")
    better = "A" if len(first) > len(second) else "B"
    return Reply(text=json.dumps({"better": better, "reason": "It says more."}), usage=JUDGED)


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    with FakeProvider(default=prefers_the_longer).running_in_thread() as served:
        yield served


def an_app(root: Path, base_url: str, started: Path, prompt: str) -> Path:
    files = app_files(base_url)
    endpoint = f"base_url: {base_url}\napi_key: sk-x\ntimeout_s: 5\n"
    files["connectors/fake/priced.yml"] = (
        f"type: openai\nmodel: text\n{endpoint}pricing: {{input_per_mtok: 2.0, output_per_mtok: 8.0}}\n")  # fmt: skip
    files["connectors/fake/judge.yml"] = (
        f"type: openai\nmodel: judge\n{endpoint}pricing: {{input_per_mtok: 1.0, output_per_mtok: 1.0}}\n")  # fmt: skip
    files["assistants/support/assistant.yml"] = (
        "name: Support\nconnector: fake.priced\n"
        f"prompts:\n  - {{role: system, content: '{prompt}'}}\n"
        "mcp: {servers: [{server: testing, tools: [echo]}], tool_loop: true}\n"
    )  # fmt: skip
    # The real MCP server, behind a line that leaves a mark when anything starts it.
    line = f"touch {started}; exec {sys.executable} -m tests.support.mcp_server"
    files["mcps/testing.yml"] = f"command: sh\nargs: [-c, '{line}']\ncwd: {REPO}\n"
    return make_app(root, files, base={})


def stored_turns(tmp_path: Path, provider: FakeProvider, started: Path) -> tuple[Path, str]:
    """Three turns of two tenants, run and stored as users have them: a tool call, and two plain answers."""
    app = an_app(tmp_path / "app", provider.base_url, started, "You are Support.")
    db = f"sqlite:///{tmp_path / 'deployment.db'}"
    provider.enqueue(
        Reply(tool_calls=(ToolCall("testing__echo", '{"text": "hi", "times": 2}'),), usage=USAGE),
        Reply(text="The tool said hihi.", usage=USAGE),
        Reply(text="Paris is the capital.", usage=USAGE),
        Reply(text="The sky is blue.", usage=USAGE),
    )
    for user, team, asked in (("ann", "acme", "Echo hi twice"), ("bob", "acme", "Capital of France?"),
                              ("cid", "globex", "What colour is the sky?")):  # fmt: skip
        code, out = cli(app, "--db", db, "chat", "support", asked, "--user", user, "--team", team)
        assert code == 0, out
    assert started.exists()  # the stored runs called the real server
    started.unlink()
    return app, db


def test_a_changed_prompt_is_replayed_with_tool_results_from_the_store_and_no_server_started(
    tmp_path: Path, provider: FakeProvider
) -> None:
    started = tmp_path / "server-started"
    _, db = stored_turns(tmp_path, provider, started)
    changed = an_app(tmp_path / "changed", provider.base_url, started, "You are Support. Be precise.")
    provider.enqueue(
        Reply(text="The sky is blue.", usage=USAGE),  # cid's, newest first: the same answer
        Reply(text=BETTER, usage=USAGE),  # bob's: better, the judge says
        # ann's: the same call written otherwise (its keys' order, no spaces), the same answer
        Reply(tool_calls=(ToolCall("testing__echo", '{"times":2,"text":"hi"}'),), usage=USAGE),
        Reply(text="The tool said  hihi.", usage=USAGE),
        model="text",
    )
    html = tmp_path / "replay.html"
    code, out = cli(changed, "--db", db, "eval", "replay", "--against", str(changed), "--judge", "fake.judge",
                    "--concurrency", "1", "--html", str(html), "--json")  # fmt: skip
    assert code == 0, out
    assert not started.exists()  # no MCP server was started: the tool's result came from the store
    report = json.loads(out)
    sky, paris, echo = report["runs"]
    assert (sky["user"], sky["team"], sky["outcome"]) == ("cid", "globex", "unchanged")
    assert (paris["outcome"], paris["why"]) == ("improved", "It says more.")
    assert (paris["old"]["answer"], paris["new"]["answer"]) == ("Paris is the capital.", BETTER)
    assert (echo["outcome"], echo["new"]["answer"]) == ("unchanged", "The tool said  hihi.")
    assert echo["old"]["tool_calls"] == echo["new"]["tool_calls"] == ['testing__echo({"text": "hi", "times": 2})']
    offered = provider.requests[-2].body["tools"]  # as the server listed it when the stored runs started it
    assert [t["function"]["name"] for t in offered] == ["testing__echo"]
    assert set(offered[0]["function"]["parameters"]["properties"]) == {"text", "times"}
    served = provider.requests[-1].body["messages"]  # what ann's new run sent the model after the tool call
    assert (served[-1]["role"], served[-1]["content"]) == ("tool", "hihi")
    assert served[-1]["tool_call_id"] == served[-2]["tool_calls"][0]["id"]
    assert "Be precise." in served[0]["content"]  # the changed app's prompt
    assert report["counts"] == {"unchanged": 2, "changed": 0, "improved": 1, "regressed": 0, "unreplayable": 0,
                                "failed": 0}  # fmt: skip
    assert report["cost_usd"] == {"old": 0.024, "new": 0.02412}  # the judge's call counted with the new runs
    page = html.read_text()
    assert "It says more." in page and "on the Seine." in page and '"tag improved"' in page


def test_a_call_the_stored_run_never_made_is_unreplayable_and_a_worse_answer_exits_1(
    tmp_path: Path, provider: FakeProvider
) -> None:
    started = tmp_path / "server-started"
    app, db = stored_turns(tmp_path, provider, started)
    provider.enqueue(
        Reply(text="I cannot say.", usage=USAGE),  # cid's: changed, and no judge was asked for
        Reply(text="<i>Paris</i>", usage=USAGE),  # bob's
        Reply(tool_calls=(ToolCall("testing__echo", '{"text": "bye"}'),), usage=USAGE),  # ann's: never stored
        model="text",
    )
    code, out = cli(app, "--db", db, "eval", "replay", "--concurrency", "1", "--assistant", "support")
    assert code == 0, out  # changed and unreplayable are reported, not failures
    rows = out.splitlines()
    assert rows[0].startswith("CHANGED       run_") and rows[0].endswith(" ms") and "cid@globex" in rows[0]
    assert rows[1:4] == ["      asked: What colour is the sky?", "      was: The sky is blue.",
                         "      now: I cannot say."]  # fmt: skip
    unreplayable = out.split("UNREPLAYABLE")[1]
    assert 'why: the stored run never called testing__echo({"text": "bye"})' in unreplayable
    assert rows[-1].startswith("3 runs: 0 unchanged, 2 changed, 0 improved, 0 regressed, 1 unreplayable, 0 failed")
    assert not started.exists()

    provider.enqueue(Reply(text="Paris.", usage=USAGE), model="text")  # bob's again, now judged worse
    code, out = cli(app, "--db", db, "eval", "replay", "--team", "acme", "--limit", "1", "--judge", "fake.judge")
    assert code == 1, out
    assert out.startswith("REGRESSED     run_") and "bob@acme" in out.splitlines()[0]
    assert "      judge: It says more." in out.splitlines()


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--judge", "fake.nope"], "--judge: no connector 'fake.nope'"),
        (["--judge", "use::grader"], "--judge: no role 'grader'"),
        (["--since", "last week"], "--since: expected an age (30m, 24h, 7d)"),
        (["--limit", "0"], "--limit: expected at least 1, got 0"),
        (["--into", "sqlite:///{db}"], "--into: that is the store the turns are read from"),
    ],
)  # fmt: skip
def test_a_bad_option_is_a_usage_error_that_says_what_was_expected(
    tmp_path: Path, args: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    app = an_app(tmp_path / "app", "http://127.0.0.1:9", tmp_path / "started", "You are Support.")
    (tmp_path / "db").mkdir()
    db = tmp_path / "db" / "x.db"
    code, _ = cli(app, "--db", f"sqlite:///{db}", "eval", "replay", *[a.format(db=db) for a in args])
    assert code == 2
    assert said in capsys.readouterr().err


def test_nothing_stored_yet_is_an_empty_report(tmp_path: Path) -> None:
    app = an_app(tmp_path / "app", "http://127.0.0.1:9", tmp_path / "started", "You are Support.")
    code, out = cli(app, "--db", f"sqlite:///{tmp_path / 'x.db'}", "eval", "replay", "--since", "7d")
    said = "0 runs: 0 unchanged, 0 changed, 0 improved, 0 regressed, 0 unreplayable, 0 failed · cost $0.0000 → $0.0000"
    assert (code, out.splitlines()[-1]) == (0, said + " · latency p50 ? → ?")


def example_app(root: Path) -> Path:
    """The example app's files an app folder is made of."""
    for part in ("app.yml", "connectors", "assistants", "mcps", "hooks", "knowledge"):
        source = REPO / part
        if source.is_dir():
            shutil.copytree(source, root / part, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            root.mkdir(parents=True, exist_ok=True)
            shutil.copy(source, root / part)
    return root


async def live_turns(app: Path, db: str, count: int) -> None:
    runs = await Runs.open(app, db=db)
    try:
        for n in range(count):
            asked = f"What's the weather in {CITIES[n % len(CITIES)]}?" if n % 2 == 0 else "Will it rain?"
            result = await runs.run(
                RunRequest("weather", Identity(f"user-{n % 7}", "acme"), [{"role": "user", "content": asked}])
            )
            assert result.status == "completed", result.error
    finally:
        await runs.aclose()


CITIES = ("Lima", "Oslo", "Cairo", "Perth", "Quito")


@pytest.mark.slow
def test_fifty_turns_of_the_example_app_replayed_on_a_changed_answer_without_its_weather_server(
    tmp_path: Path,
) -> None:
    app = example_app(tmp_path / "app")
    db = f"sqlite:///{tmp_path / 'deployment.db'}"
    asyncio.run(live_turns(app, db, 50))
    changed = example_app(tmp_path / "changed")
    scripted = changed / "connectors/demo/weather.yml"  # the author rewords the answer after the forecast
    scripted.write_text(scripted.read_text().replace("Here is what the weather service says:", "Forecast:"))
    started = tmp_path / "weather-server-started"
    line = f"touch {started}; exec {sys.executable} mcps/weather_server.py"
    (changed / "mcps/weather.yml").write_text(f"command: sh\nargs: [-c, '{line}']\ntimeout_s: 10\n")

    code, out = cli(app, "--db", db, "eval", "replay", "--against", str(changed), "--json")
    assert code == 0, out
    assert not started.exists()  # the weather server of the changed app never started
    report = json.loads(out)
    assert report["counts"] | {"changed": 25, "unchanged": 25} == report["counts"]  # and nothing else
    for turn in report["runs"]:
        old, new = turn["old"], turn["new"]
        if turn["question"] == "Will it rain?":
            assert turn["outcome"] == "unchanged" and new["tool_calls"] == []
            continue
        assert turn["outcome"] == "changed" and new["tool_calls"] == old["tool_calls"]  # the same forecast call
        forecast = old["answer"].removeprefix("Here is what the weather service says: ")
        assert new["answer"] == f"Forecast: {forecast}"  # the stored result, reworded
