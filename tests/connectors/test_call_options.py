"""The call options, named once (connectors/request.py): what the app's files may set, what a run sets over
them, and the order a provider receives them in."""

from __future__ import annotations

import pytest

from yao_agent.connectors import CallOptions
from yao_agent.connectors.request import CALL_OPTIONS, RUN_CALL_OPTIONS
from yao_agent.dsl.schema import load_schema


@pytest.mark.parametrize("kind", ["assistant", "connector"])
def test_the_options_an_app_file_may_set_are_the_call_options(kind: str) -> None:
    options = load_schema(kind)["$defs"]["options"]
    assert sorted(options["properties"]) == sorted(CALL_OPTIONS)
    assert options["additionalProperties"] is False


def test_a_run_sets_the_call_options_but_the_operators_own() -> None:
    assert set(CALL_OPTIONS) - set(RUN_CALL_OPTIONS) == {"user", "tool_choice", "extra_body"}


def test_options_keep_the_order_they_were_given_in() -> None:
    """The assistant's as its file lists them, then what a run sets in the fields' order: a name both set
    keeps its place with the run's value."""
    assistant = CallOptions.of({"max_tokens": 50, "tool_choice": "auto", "temperature": 0.1})
    run = CallOptions.of({"seed": 7, "temperature": 0.5, "top_p": 0.9})
    merged = assistant.over(run).to_json()
    assert list(merged.items()) == [("max_tokens", 50), ("tool_choice", "auto"), ("temperature", 0.5),
                                    ("top_p", 0.9), ("seed", 7)]  # fmt: skip
    assert assistant.over(CallOptions()) is assistant
    assert "seed" not in assistant.over(run).without("seed").to_json()


def test_a_name_that_is_no_call_option_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown call option 'temprature'"):
        CallOptions.of({"temprature": 1})
    assert CallOptions.of({"seed": None}) == CallOptions()  # null: not set
