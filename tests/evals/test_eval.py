"""`yao-agent eval`: an app's cases run as stored runs against the model over real HTTP (the loopback fake
provider), each expectation checked, a row per case, exit 0 only when all pass; a judge graded through
a connector of the app; a broken eval file refused by `validate` with its file and line."""

from __future__ import annotations

import json
from pathlib import Path
from xml.etree import ElementTree

import pytest

from tests.support import REPO
from tests.support.apps import make_app
from tests.support.cli import cli
from tests.support.runtimes import app_files
from yao_agent.testing import FakeProvider, Reply, ToolCall

USAGE = {"prompt_tokens": 1000, "completion_tokens": 500, "total_tokens": 1500}  # $0.006 at the prices below
JUDGED = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}  # $0.00012 at the judge's


def app_with(tmp_path: Path, base_url: str, eval_yaml: str) -> Path:
    files = app_files(base_url)
    endpoint = f"base_url: {base_url}\napi_key: sk-x\ntimeout_s: 5\n"
    files["connectors/fake/priced.yml"] = (
        f"type: openai\nmodel: text\n{endpoint}pricing: {{input_per_mtok: 2.0, output_per_mtok: 8.0}}\n")  # fmt: skip
    files["connectors/fake/judge.yml"] = (
        f"type: openai\nmodel: judge\n{endpoint}pricing: {{input_per_mtok: 1.0, output_per_mtok: 1.0}}\n")  # fmt: skip
    files["assistants/support/assistant.yml"] = "name: Support\nconnector: fake.priced\n"
    files["evals/support.yml"] = eval_yaml
    return make_app(tmp_path / "app", files, base={})


SUPPORT = """\
assistant: support
judge_with: fake.judge
concurrency: 1
cases:
  - name: refund policy
    input: "Can I return shoes after 40 days?"
    expect:
      - contains: "30 days"
      - not_contains: "sorry"
      - max_cost_usd: 0.01
      - judge: "Says returns close after 30 days and offers store credit"
  - name: order as JSON
    input: "My last order, as JSON"
    expect:
      - json_schema: {type: object, required: [order], properties: {order: {type: integer}}}
      - regex: "\\\\d{4}"
"""


def test_cases_that_pass_exit_0_with_a_row_each_their_cost_and_the_judges_reason(
    tmp_path: Path, threaded_provider: FakeProvider
) -> None:
    app = app_with(tmp_path, threaded_provider.base_url, SUPPORT)
    threaded_provider.enqueue(
        Reply(text="Returns close after 30 days; after that we offer store credit.", usage=USAGE),
        Reply(text='{"pass": true, "reason": "It names the 30 days and the store credit."}', usage=JUDGED),
        Reply(text='```json\n{"order": 1042}\n```', usage=USAGE),
    )
    db = f"sqlite:///{tmp_path / 'eval.db'}"
    code, out = cli(app, "--db", db, "eval", "--junit", str(tmp_path / "junit.xml"))
    assert code == 0, out
    rows = out.splitlines()
    assert rows[0].startswith("PASS  evals/support.yml:5  refund policy  $0.0061  ") and rows[0].endswith(" ms")
    assert rows[1] == "      judge: It names the 30 days and the store credit."
    assert rows[2].startswith("PASS  evals/support.yml:12  order as JSON  $0.0060")
    assert rows[3] == "2 cases: 2 passed, 0 failed · $0.0121"
    judged = threaded_provider.requests[1]
    assert judged.body["model"] == "judge"
    asked = judged.body["messages"][1]["content"]
    assert "Says returns close after 30 days" in asked and "store credit." in asked and "40 days?" in asked
    suite = ElementTree.parse(tmp_path / "junit.xml").getroot().find("testsuite")
    assert suite is not None and (suite.get("tests"), suite.get("failures")) == ("2", "0")
    code, usage = cli(app, "--db", db, "usage", "--user", "eval", "--json")  # ordinary runs, metered as eval's
    assert code == 0 and json.loads(usage)["total"]["runs"] == 2, usage


def test_a_case_that_fails_names_the_expectation_and_what_was_seen_and_exits_1(
    tmp_path: Path, threaded_provider: FakeProvider
) -> None:
    app = app_with(tmp_path, threaded_provider.base_url, SUPPORT)
    threaded_provider.enqueue(
        Reply(text="Sorry, returns close after 14 days.", usage=USAGE),
        Reply(text='{"pass": false, "reason": "It gives 14 days, not 30."}', usage=JUDGED),
        Reply(text="Order 1042", usage=USAGE),
    )
    code, out = cli(app, "--db", f"sqlite:///{tmp_path / 'eval.db'}", "eval", "support", "--json")
    assert code == 1, out
    report = json.loads(out)
    assert (report["passed"], report["failed"]) == (0, 2)
    refund, order = report["cases"]
    assert [(f["expectation"], f["said"]) for f in refund["failures"]] == [
        ("contains: 30 days", 'the answer does not say it: "Sorry, returns close after 14 days."'),
        ("not_contains: sorry", 'the answer says it: "Sorry, returns close after 14 days."'),
        ("judge: Says returns close after 30 days and offers store credit", "It gives 14 days, not 30."),
    ]  # fmt: skip
    assert order["failures"][0]["expectation"].startswith("json_schema: ")
    assert "not JSON" in order["failures"][0]["said"] and len(order["failures"]) == 1  # the regex matched
    assert refund["cost_usd"] == 0.00612 and refund["runs"][0]["status"] == "completed"


def test_a_junit_file_that_cannot_be_written_says_so_after_the_report(
    tmp_path: Path, threaded_provider: FakeProvider, capsys: pytest.CaptureFixture[str]
) -> None:
    app = app_with(tmp_path, threaded_provider.base_url, "assistant: chat\ncases: [{name: a, input: hi}]\n")
    threaded_provider.enqueue(Reply(text="hello"))
    nowhere = tmp_path / "no-such-folder" / "junit.xml"
    code, out = cli(app, "--db", f"sqlite:///{tmp_path / 'eval.db'}", "eval", "--junit", str(nowhere))
    assert code == 2 and out.splitlines()[-1].startswith("1 cases: 1 passed"), out
    assert f"error: --junit {nowhere}: cannot write it (No such file or directory)" in capsys.readouterr().err


def test_a_run_refused_before_it_starts_fails_its_case_and_the_others_still_run(
    tmp_path: Path, threaded_provider: FakeProvider
) -> None:
    cases = """\
assistant: private
concurrency: 1
cases:
  - {name: refused, input: hi, expect: [{contains: hi}]}
"""
    app = app_with(tmp_path, threaded_provider.base_url, cases)
    (app / "evals/chat.yml").write_text(
        "assistant: chat\ncases: [{name: answered, input: hi, expect: [{contains: hi}]}]\n"
    )
    (app / "assistants/private").mkdir()
    (app / "assistants/private/assistant.yml").write_text("name: Private\naccess: {teams: [acme]}\n")
    threaded_provider.enqueue(Reply(text="hi there"))
    code, out = cli(app, "--db", f"sqlite:///{tmp_path / 'eval.db'}", "eval")
    assert code == 1, out
    rows = out.splitlines()
    assert rows[0].startswith("PASS  evals/chat.yml:2  answered  $?  ")  # (fake.model has no price)
    assert rows[1].startswith("FAIL  evals/support.yml:4  refused")
    assert rows[2].startswith("      ✗ the run completes: it was refused: ") and "private" in rows[2], out


def test_a_tool_call_is_checked_with_its_arguments_and_a_run_that_fails_fails_its_case(
    tmp_path: Path, threaded_provider: FakeProvider
) -> None:
    cases = """\
assistant: tooled
concurrency: 1
repeat: 2
cases:
  - name: echoes
    input: "Say hi back"
    expect:
      - tool_called: {name: testing__echo, args: {text: hi}}
"""
    app = app_with(tmp_path, threaded_provider.base_url, cases)
    (app / "mcps").mkdir()
    (app / "mcps/testing.yml").write_text(f"command: python\nargs: [-m, tests.support.mcp_server]\ncwd: {REPO}\n")
    (app / "assistants/tooled").mkdir()
    tools = "mcp: {servers: [{server: testing, tools: [echo]}], tool_loop: true}\n"
    (app / "assistants/tooled/assistant.yml").write_text(f"name: Tooled\nconnector: fake.model\n{tools}")
    threaded_provider.enqueue(
        Reply(tool_calls=(ToolCall("testing__echo", '{"text": "hi"}'),)),
        Reply(text="hi"),
        Reply(status=400, error_message="bad request"),
    )
    code, out = cli(app, "--db", f"sqlite:///{tmp_path / 'eval.db'}", "eval")
    assert code == 1, out
    rows = out.splitlines()
    assert rows[0].startswith("FAIL  evals/support.yml:5  echoes  ")
    assert rows[1].startswith("      ✗ the run completes (run 2): it ended failed (model_error)"), out
    assert len(rows) == 3  # run 1 called the tool as expected: nothing else failed


@pytest.mark.parametrize(
    ("written", "line", "said"),
    [
        ("assistant: nobody\ncases: [{name: a, input: hi}]\n", 1, "unknown assistant 'nobody'"),
        ("assistant: chat\ncases:\n  - name: a\n    input: hi\n    expect: [{judge: fair}]\n", 5, "needs `judge_with`"),
        ("assistant: chat\ncases:\n  - name: a\n    input: hi\n    expect: [{regex: '(a'}]\n", 5, "regex"),
        ("assistant: chat\ncases:\n  - {name: a, input: hi}\n  - {name: a, input: ho}\n", 4, "named twice"),
        ("assistant: chat\njudge_with: fake.nope\ncases: [{name: a, input: hi}]\n", 2, "unknown connector"),
        ("assistant: chat\ncases: [{name: a, input: hi, expect: [{contians: x}]}]\n", 2, "expect"),
    ],
)  # fmt: skip
def test_a_broken_eval_file_is_refused_where_it_is_written(tmp_path: Path, written: str, line: int, said: str) -> None:
    app = app_with(tmp_path, "http://127.0.0.1:9", written)
    code, out = cli(app, "validate")
    assert code == 2, out
    assert f"evals/support.yml:{line}" in out and said in out, out
    assert cli(app, "eval")[0] == 2  # nothing runs


def test_an_eval_named_that_the_app_does_not_have_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    app = app_with(tmp_path, "http://127.0.0.1:9", "assistant: chat\ncases: [{name: a, input: hi}]\n")
    outside = tmp_path / "elsewhere.yml"
    outside.write_text("assistant: chat\n")
    for given in ("nope", str(outside), str(app / "evals" / "missing.yml")):
        assert cli(app, "eval", given) == (2, ""), given
        assert f"no eval {given!r} in the app (known: support)" in capsys.readouterr().err


def test_the_example_apps_evals_pass_offline_with_the_weather_servers_tool(tmp_path: Path) -> None:
    code, out = cli(REPO, "--db", f"sqlite:///{tmp_path / 'eval.db'}", "eval", "evals/weather.yml")
    assert code == 0, out
    assert out.splitlines()[-1].startswith("2 cases: 2 passed, 0 failed")
