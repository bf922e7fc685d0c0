"""`yao-agent runs CHAT_ID [RUN_ID]`: what each run of a chat did — why each model call was made, who
answered, the tokens and the time — as a person reads it, and as JSON."""

from __future__ import annotations

import json

from tests.support.cli import Cli
from yao_agent.testing import FakeProvider, Reply


def test_runs_lists_a_chats_runs_and_shows_one_runs_steps(cli: Cli, threaded_provider: FakeProvider) -> None:
    usage = {"prompt_tokens": 120, "completion_tokens": 35, "total_tokens": 155}
    threaded_provider.enqueue(Reply(text="Hello.", usage=usage))
    assert cli("chat", "tooled", "hi", "--chat", "r1")[0] == 0
    code, listed = cli("runs", "r1")
    assert code == 0
    lines = listed.splitlines()
    assert len(lines) == 1 and "tooled  completed (completed)  155 tokens" in lines[0]
    run_id = lines[0].split()[0]
    code, shown = cli("runs", "r1", run_id)
    assert code == 0
    step = shown.splitlines()[1]
    assert step.split()[:4] == ["1", "llm", "first", "fake.model/text"] and "120→35 tokens" in step
    assert step.endswith("completed")
    code, as_json = cli("runs", "r1", run_id, "--json")
    view = json.loads(as_json)
    assert (view["run_id"], view["steps"][0]["connector"], view["steps"][0]["usage"]["input_tokens"]) == (
        run_id,
        "fake.model",
        120,
    )


def test_runs_of_a_chat_that_is_not_yours_is_exit_2(cli: Cli, threaded_provider: FakeProvider) -> None:
    threaded_provider.enqueue(Reply(text="Hello."))
    assert cli("chat", "tooled", "hi", "--chat", "r2")[0] == 0
    assert cli("runs", "r2", "--user", "mallory")[0] == 2
    assert cli("runs", "nope")[0] == 2
    assert cli("runs", "r2", "run_nope")[0] == 2


def test_a_try_that_failed_and_was_retried_shows_as_a_step(cli: Cli, threaded_provider: FakeProvider) -> None:
    """The provider's 503, retried: the failed try is a line of its own, with who failed how."""
    threaded_provider.enqueue(Reply(status=503, error_message="overloaded"), Reply(text="Hello."))
    assert cli("chat", "tooled", "hi", "--chat", "r3")[0] == 0
    run_id = cli("runs", "r3")[1].split()[0]
    code, shown = cli("runs", "r3", run_id)
    assert code == 0
    tried, answered = shown.splitlines()[1:]
    assert tried.split()[:4] == ["1", "llm", "first", "fake.model/text"] and "recovered" in tried
    assert tried.endswith("model call to fake.model failed: provider error (HTTP 503): overloaded")
    assert answered.split()[:4] == ["2", "llm", "first", "fake.model/text"] and answered.endswith("completed")
