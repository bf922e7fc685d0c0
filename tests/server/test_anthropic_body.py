"""Anthropic's request shapes as ours, as pure functions: turns with tool use and results, client tools,
the tool choice, and our calls as `tool_use` blocks."""

from __future__ import annotations

from typing import Any

import pytest

from yao_agent.messages import ToolCall, parse_input
from yao_agent.server.anthropic_body import (
    MessagesBody,
    function_tools,
    openai_tool_choice,
    to_messages,
    tool_use_block,
)
from yao_agent.server.errors import InvalidParam

ROUND_TRIP: list[dict[str, Any]] = [
    {"role": "user", "content": "Weather in Lima?"},
    {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
    {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "I should look.", "signature": "sig"},
        {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "id": "toolu_1", "name": "forecast", "input": {"city": "Lima"}},
        {"type": "tool_use", "id": "toolu_2", "name": "clock", "input": {}},
    ]},
    {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "19 °C"}]},
        {"type": "tool_result", "tool_use_id": "toolu_2", "content": "no clock here", "is_error": True},
        {"type": "text", "text": "And tomorrow?", "cache_control": {"type": "ephemeral"}},
    ]},
]  # fmt: skip


def test_tool_use_and_results_become_calls_and_tool_messages() -> None:
    ours = to_messages(ROUND_TRIP)
    assert ours == [
        {"role": "user", "content": "Weather in Lima?"},
        {"role": "system", "content": "Be brief."},
        {"role": "assistant", "content": "Let me look.", "tool_calls": [
            {"id": "toolu_1", "type": "function", "function": {"name": "forecast", "arguments": '{"city": "Lima"}'}},
            {"id": "toolu_2", "type": "function", "function": {"name": "clock", "arguments": "{}"}},
        ]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "19 °C"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": "error: no clock here"},
        {"role": "user", "content": "And tomorrow?"},
    ]  # fmt: skip
    assert parse_input(ours) == ours  # what the pipeline accepts as it is


WRONG: list[tuple[Any, str]] = [
        ([{"role": "tool", "content": "x"}], "messages[0].role: expected user, assistant or system"),
        ([{"role": "system", "content": [{"type": "image", "source": {}}]}], "messages[0].content[0]: expected a text"),
        ([{"role": "user", "content": []}], "messages[0].content: expected a string or a non-empty list"),
        ([{"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "n", "input": {}}]}],
         "messages[0].content[0].type: 'tool_use' is not supported in a user turn"),
        ([{"role": "user", "content": [{"type": "image", "source": {"type": "file", "file_id": "f"}}]}],
         "messages[0].content[0].source.type: expected base64 or url, got 'file'"),
        ([{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/bmp",
                                                                     "data": "x"}}]}],
         "messages[0].content[0].source.media_type: expected one of image/jpeg"),
        ([{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "n", "input": []}]}],
         "messages[0].content[0].input: expected an object"),
        ([{"role": "user", "content": [{"type": "tool_result", "content": "x"}]}],
         "messages[0].content[0].tool_use_id: expected the id of the tool_use this answers"),
        ([{"role": "user", "content": "x", "name": "me"}], "messages[0].name: unknown field"),
]  # fmt: skip


@pytest.mark.parametrize(("messages", "said"), WRONG)
def test_a_wrong_block_is_a_400_naming_its_place(messages: list[dict[str, Any]], said: str) -> None:
    with pytest.raises(InvalidParam) as refused:
        to_messages(messages)
    assert str(refused.value).startswith(said) and refused.value.param == "messages"


def test_client_tools_become_function_tools() -> None:
    tools: list[dict[str, Any]] = [
             {"name": "forecast", "description": "The weather.", "input_schema": {"type": "object"}},
             {"type": "custom", "name": "clock", "input_schema": {"type": "object", "properties": {}},
              "strict": True, "cache_control": {"type": "ephemeral"}, "eager_input_streaming": True}]  # fmt: skip
    assert function_tools(tools) == [
        {"type": "function", "function": {"name": "forecast", "parameters": {"type": "object"},
                                          "description": "The weather."}},
        {"type": "function", "function": {"name": "clock", "parameters": {"type": "object", "properties": {}},
                                          "strict": True}},
    ]  # fmt: skip
    with pytest.raises(InvalidParam, match="server tools are not available"):
        function_tools([{"type": "web_search_20250305", "name": "web_search"}])


def test_the_tool_choice_maps_to_openais() -> None:
    assert openai_tool_choice(None) == (None, None)
    assert openai_tool_choice({"type": "auto"}) == ("auto", None)
    assert openai_tool_choice({"type": "any", "disable_parallel_tool_use": True}) == ("required", False)
    assert openai_tool_choice({"type": "tool", "name": "forecast"}) == (
        {"type": "function", "function": {"name": "forecast"}}, None)  # fmt: skip
    assert openai_tool_choice({"type": "none"}) == ("none", None)
    with pytest.raises(InvalidParam):
        openai_tool_choice({"type": "tool"})


def test_our_call_is_a_tool_use_block() -> None:
    assert tool_use_block(ToolCall("call_1", "forecast", '{"city": "Lima"}')) == {
        "type": "tool_use", "id": "call_1", "name": "forecast", "input": {"city": "Lima"}}  # fmt: skip


def body(**fields: Any) -> MessagesBody:
    hi = [{"role": "user", "content": "hi"}]
    return MessagesBody.model_validate({"model": "chat", "max_tokens": 10, "messages": hi, **fields})


REFUSED: list[tuple[dict[str, Any], str]] = [
     ({"tool_choice": {"type": "some"}}, "tool_choice"),
     ({"thinking": {"type": "enabled", "budget_tokens": 2000}}, "thinking"), ({"top_k": 5}, "top_k"),
     ({"container": "c"}, "container"), ({"service_tier": "priority"}, "service_tier"), ({"n": 2}, "n"),
     ({"inference_geo": "us"}, "inference_geo"), ({"speed": "fast"}, "speed")]  # fmt: skip


@pytest.mark.parametrize(("fields", "param"), REFUSED)
def test_what_this_door_cannot_honour_is_refused_by_name(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidParam) as refused:
        body(**fields).check()
    assert refused.value.param == param and str(refused.value).startswith(f"{param}: ")


TOOLS_REFUSED: list[tuple[dict[str, Any], str]] = [
     ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]},
      "tools[0].type: 'web_search_20250305': Anthropic's server tools are not available here"),
     ({"tools": [{"name": "x", "input_schema": {}, "defer_loading": True}]}, "tools[0].defer_loading: only false"),
     ({"tools": [{"name": "x", "input_schema": {}, "input_examples": [{}]}]}, "tools[0].input_examples: not"),
     ({"tools": [{"name": "x", "input_schema": {}, "color": "red"}]}, "tools[0].color: unknown field"),
     ({"tools": [{"name": "x", "input_schema": {}}, {"name": "x", "input_schema": {}}]},
      "tools[1].name: 'x' is given twice"),
     ({"tools": [{"name": "a b", "input_schema": {}}]}, "tools[0].name: expected 1 to 64 letters"),
     ({"tools": [{"name": "x", "input_schema": "object"}]}, "tools[0].input_schema: expected a JSON Schema"),
     ({"tools": [{"name": "x", "input_schema": {}, "strict": "yes"}]}, "tools[0].strict: expected a boolean"),
     ({"tools": [{"name": "x", "input_schema": {"description": "\ud800"}}]}, "tools[0].input_schema.description: text"),
     ({"tool_choice": {"type": "none", "disable_parallel_tool_use": True}},
      "tool_choice.disable_parallel_tool_use: unknown field for a tool_choice of type none"),
     ({"tool_choice": {"type": "tool", "name": ""}}, "tool_choice.name: expected the name of the tool to call"),
     ({"tool_choice": {"type": "any", "disable_parallel_tool_use": 1}},
      "tool_choice.disable_parallel_tool_use: expected a boolean")]  # fmt: skip


@pytest.mark.parametrize(("fields", "said"), TOOLS_REFUSED)
def test_a_tool_or_tool_choice_it_cannot_honour_is_refused_at_its_place(fields: dict[str, Any], said: str) -> None:
    with pytest.raises(InvalidParam) as refused:
        body(**fields).check()
    assert refused.value.param == next(iter(fields)) and str(refused.value).startswith(said)


def test_harmless_values_pass_and_options_reach_the_model_call() -> None:
    given = body(tools=[], tool_choice={"type": "auto"}, thinking={"type": "disabled"}, service_tier="auto",
                 temperature=0.2, top_p=0.9, stop_sequences=["END"], metadata={"user_id": "u1"})  # fmt: skip
    given.check()
    assert given.call_options() == {"max_tokens": 10, "temperature": 0.2, "top_p": 0.9, "stop": ["END"]}
    assert given.run_metadata() == {"user": "u1"}
