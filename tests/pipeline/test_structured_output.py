"""Structured output (CONTRACT §4 item 7): the final answer is JSON valid against the run's output schema,
an answer that is not goes back to the model with the validator's words, and the value ends the run."""
# pyright: reportTypedDictNotRequiredAccess=false
# (an answer's optional keys are read as present: a missing one is a KeyError, which fails the test)

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.runtimes import ALICE, app_files, end_of, make_runtime, runs_of, stored, turn
from yao_agent.base.structured import (
    AnswerProblem,
    SchemaUnusable,
    check_answer,
    parse_answer,
    schema_problems,
    unfenced,
)
from yao_agent.events import to_dict
from yao_agent.pipeline import RunRequest, Runtime
from yao_agent.store import SqlStore
from yao_agent.testing import Reply, ScriptedModel

WEATHER = """\
name: Weather
output:
  schema:
    type: object
    properties:
      city: {type: string}
      celsius: {type: number}
    required: [city, celsius]
  retries: {retries}
"""
SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "celsius": {"type": "number"}},
    "required": ["city", "celsius"],
}
PARIS = {"city": "Paris", "celsius": 21.5}


def weather_files(base_url: str, *, retries: int = 2, connector: str = "") -> dict[str, str]:
    files = app_files(base_url)
    files["assistants/weather/assistant.yml"] = WEATHER.replace("{retries}", str(retries))
    files["connectors/fake/model.yml"] += connector
    return files


@pytest.fixture
async def rt(tmp_path: Path, fake: ScriptedModel, store: SqlStore) -> AsyncIterator[Runtime]:
    """The `weather` assistant with an output schema (2 retries) and the plain `chat` one, on the fake model."""
    runtime = make_runtime(tmp_path / "app", store, weather_files(fake.base_url), model=fake)
    try:
        yield runtime
    finally:
        await runtime.engines.aclose()


async def transitions(rt: Runtime, run_id: str, chat_id: str = "c1") -> list[Any]:
    """The run's `llm` steps' transitions, as GET /api/chats/{id}/runs/{run_id} shows them."""
    view = (await runs_of(rt).run_view(ALICE, chat_id, run_id)).to_api()
    return [step.get("transition") for step in view["steps"] if step["type"] == "llm"]


async def test_a_valid_answer_is_the_runs_output(rt: Runtime, fake: ScriptedModel) -> None:
    fake.enqueue(Reply(text=json.dumps(PARIS)))
    end = end_of(await turn(rt, "Weather in Paris?", assistant="weather"))
    assert (end.status, end.reason, end.output) == ("completed", "completed", PARIS)
    assert to_dict(end)["output"] == PARIS
    [request] = fake.requests
    # The provider gets the schema as its structured-output parameter, named after the assistant.
    assert request.body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "weather", "schema": SCHEMA},
    }
    assert await transitions(rt, end.run_id) == ["first"]


async def test_an_assistant_without_a_schema_sends_no_output(rt: Runtime, fake: ScriptedModel) -> None:
    fake.enqueue(Reply(text="not JSON, and fine"))
    end = end_of(await turn(rt, "hi"))
    assert (end.status, end.output) == ("completed", None)
    assert "output" not in to_dict(end)
    assert "response_format" not in fake.requests[0].body


async def test_a_fenced_answer_counts_and_is_stored_as_said(rt: Runtime, fake: ScriptedModel) -> None:
    said = "```json\n" + json.dumps(PARIS, indent=2) + "\n```"
    fake.enqueue(Reply(text=said))
    end = end_of(await turn(rt, "Weather in Paris?", assistant="weather"))
    assert (end.status, end.output) == ("completed", PARIS)
    assert await stored(rt) == [("user", "Weather in Paris?", "completed"), ("assistant", said, "completed")]


WRONG = [
    pytest.param('{"city": "Paris", "celsius": "warm"}', "at $.celsius: 'warm' is not of type 'number'", id="type"),
    pytest.param('{"city": "Paris"}', "at $: 'celsius' is a required property", id="missing"),
    pytest.param("It is 21.5 °C in Paris.", "the answer is not JSON: Expecting value at line 1 column 1", id="prose"),
]


@pytest.mark.parametrize(("answer", "said"), WRONG)
async def test_an_invalid_answer_is_corrected_with_the_validators_words(
    rt: Runtime, fake: ScriptedModel, answer: str, said: str
) -> None:
    fake.enqueue(Reply(text=answer), Reply(text=json.dumps(PARIS)))
    end = end_of(await turn(rt, "Weather in Paris?", assistant="weather"))
    assert (end.status, end.output) == ("completed", PARIS)
    first, retry = fake.requests
    assert retry.messages[: len(first.messages)] == first.messages
    assert retry.messages[len(first.messages)] == {"role": "assistant", "content": answer}
    correction = retry.messages[-1]
    assert correction["role"] == "user" and said in correction["content"]
    assert json.dumps(SCHEMA, separators=(",", ":")) in correction["content"]  # what to fit, said again
    assert "tools" not in retry.body and retry.body["response_format"] == first.body["response_format"]
    assert await transitions(rt, end.run_id) == ["first", "output_retry"]
    # Both answers are the chat's, as said; the correction was for that turn only.
    assert [content for role, content, _ in await stored(rt) if role == "assistant"] == [answer, json.dumps(PARIS)]


async def test_retries_exhausted_end_the_run_output_error(tmp_path: Path, store: SqlStore, fake: ScriptedModel) -> None:
    rt = make_runtime(tmp_path / "app", store, weather_files(fake.base_url, retries=1), model=fake)
    fake.enqueue(Reply(text="sunny"), Reply(text='{"city": "Paris", "celsius": null}'), Reply(text="unused"))
    end = end_of(await turn(rt, "Weather in Paris?", assistant="weather"))
    assert (end.status, end.reason, end.output) == ("failed", "output_error", None)
    assert end.error == {
        "message": "the final answer is not valid against the output schema after 1 correction: "
        "at $.celsius: None is not of type 'number'"
    }
    assert len(fake.requests) == 2 and fake.pending == 1
    assert await transitions(rt, end.run_id) == ["first", "output_retry"]
    result = await runs_of(rt).run(RunRequest("weather", ALICE, [{"role": "user", "content": "again"}], chat_id="c2"))
    assert (result.status, result.reason, result.output) == ("failed", "output_error", None)
    await rt.engines.aclose()


async def test_no_retries_fails_at_the_first_invalid_answer(
    tmp_path: Path, store: SqlStore, fake: ScriptedModel
) -> None:
    rt = make_runtime(tmp_path / "app", store, weather_files(fake.base_url, retries=0), model=fake)
    fake.enqueue(Reply(text="[]"))
    end = end_of(await turn(rt, "Weather in Paris?", assistant="weather"))
    assert (end.reason, end.error["message"]) == (
        "output_error",
        "the final answer is not valid against the output schema after 0 corrections: at $: [] is not of type 'object'",
    )
    await rt.engines.aclose()


async def test_a_connector_without_structured_output_gets_the_schema_in_words(
    tmp_path: Path, store: SqlStore, fake: ScriptedModel
) -> None:
    files = weather_files(fake.base_url, connector="capabilities: {structured_output: false}\n")
    rt = make_runtime(tmp_path / "app", store, files, model=fake)
    fake.enqueue(Reply(text=json.dumps(PARIS)))
    end = end_of(await turn(rt, "Weather in Paris?", assistant="weather"))
    assert (end.status, end.output) == ("completed", PARIS)
    [request] = fake.requests
    assert "response_format" not in request.body
    assert request.messages[-1] == {
        "role": "system",
        "content": "Answer with one JSON value only, no other text, valid against this JSON Schema: "
        + json.dumps(SCHEMA, separators=(",", ":")),
    }
    await rt.engines.aclose()


async def test_the_python_api_returns_the_output(rt: Runtime, fake: ScriptedModel) -> None:
    fake.enqueue(Reply(text=json.dumps(PARIS)))
    result = await runs_of(rt).run(RunRequest("weather", ALICE, [{"role": "user", "content": "Paris?"}], chat_id="c1"))
    assert (result.status, result.output) == ("completed", PARIS)
    assert result.to_api().get("output") == PARIS


async def test_a_requests_response_format_wins_over_the_assistants_schema(rt: Runtime, fake: ScriptedModel) -> None:
    """As an OpenAI-compatible request's `response_format` arrives: one of the run's call options."""
    city = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    asked = {"type": "json_schema", "json_schema": {"name": "City", "schema": city}}
    fake.enqueue(Reply(text=json.dumps(PARIS)), Reply(text='{"name": "Paris"}'))
    request = RunRequest("weather", ALICE, [{"role": "user", "content": "a city"}], chat_id="c1",
                         options={"response_format": asked})  # fmt: skip
    result = await runs_of(rt).run(request)
    assert (result.status, result.output) == ("completed", {"name": "Paris"})
    assert [r.body["response_format"] for r in fake.requests] == [asked, asked]
    assert "at $: 'name' is a required property" in fake.requests[1].messages[-1]["content"]


@pytest.mark.parametrize(
    ("answer", "fits"), [("[1, 2]", False), ('"text"', False), ('{"any": ["thing"]}', True)], ids=str
)
async def test_json_object_mode_wants_an_object(rt: Runtime, fake: ScriptedModel, answer: str, fits: bool) -> None:
    fake.enqueue(Reply(text=answer), Reply(text="{}"))
    request = RunRequest("chat", ALICE, [{"role": "user", "content": "JSON"}], chat_id="c1",
                         options={"response_format": {"type": "json_object"}})  # fmt: skip
    result = await runs_of(rt).run(request)
    assert (result.status, result.output) == ("completed", json.loads(answer) if fits else {})
    assert len(fake.requests) == (1 if fits else 2)


async def test_text_mode_checks_nothing(rt: Runtime, fake: ScriptedModel) -> None:
    fake.enqueue(Reply(text="free text"))
    request = RunRequest("weather", ALICE, [{"role": "user", "content": "hi"}], chat_id="c1",
                         options={"response_format": {"type": "text"}})  # fmt: skip
    result = await runs_of(rt).run(request)
    assert (result.status, result.output) == ("completed", None)


async def test_a_delegated_childs_reply_is_checked_as_the_roots_answer(
    tmp_path: Path, store: SqlStore, fake: ScriptedModel
) -> None:
    """A hand-over's reply becomes the root's final answer, so the root's schema applies to it (and the root
    corrects it); the child's own run is never checked."""
    files = weather_files(fake.base_url)
    files["hooks/front.js"] = "function Create() { return {delegate: {assistant_id: 'chat'}} }\n"
    files["assistants/weather/assistant.yml"] += "hook: hooks/front.js\n"
    rt = make_runtime(tmp_path / "app", store, files, model=fake)
    fake.enqueue(Reply(text="Paris, 21.5"), Reply(text=json.dumps(PARIS)))
    try:
        end = end_of(await turn(rt, "Weather in Paris?", assistant="weather"))
        assert (end.status, end.output) == ("completed", PARIS)
        child, root = fake.requests
        assert "response_format" not in child.body  # `chat` has no schema of its own
        assert root.body["response_format"]["json_schema"]["name"] == "weather"
        assert await transitions(rt, end.run_id) == ["first", "output_retry"]
    finally:
        await rt.engines.aclose()
        await rt.hooks.aclose()


# Python's `$` also matches before a final newline, RE2's does not: "a\n" tells which engine matched.
ENGINE = [
    pytest.param({"type": "string", "pattern": "^a$"}, "a\n", "at $: 'a\\n' does not match '^a$'", id="pattern"),
    pytest.param(
        {"patternProperties": {"^a$": {"type": "integer"}}, "additionalProperties": False},
        {"a\n": 1},
        "at $: 'a\\n' does not match any of the regexes: '^a$'",
        id="additionalProperties",
    ),
    pytest.param(
        {"patternProperties": {"^a$": {}}, "unevaluatedProperties": False},
        {"a\n": 1},
        "at $: Unevaluated properties are not allowed ('a\\n' was unexpected)",
        id="unevaluatedProperties",
    ),
    pytest.param({"format": "regex"}, "(a)\\1", "at $: '(a)\\\\1' is not a 'regex'", id="format"),
]


@pytest.mark.parametrize(("schema", "answer", "said"), ENGINE)
def test_every_pattern_of_a_schema_runs_on_re2(schema: dict[str, Any], answer: Any, said: str) -> None:
    """Each place `jsonschema` matches a regex (the `pattern` keyword, `patternProperties` and the helpers
    behind `additionalProperties` and `unevaluatedProperties`, the `regex` format) uses RE2."""
    with pytest.raises(AnswerProblem) as caught:
        check_answer(schema, answer)
    assert str(caught.value) == said


def test_pattern_properties_match_on_re2() -> None:
    schema = {"patternProperties": {"^a$": {"type": "integer"}}}
    check_answer(schema, {"a\n": "not an integer, and not an 'a' for RE2"})
    with pytest.raises(AnswerProblem):
        check_answer(schema, {"a": "text"})


def test_a_schemas_own_dialect_is_read_as_2020_12_and_counted() -> None:
    """A `$schema` naming another draft would switch `jsonschema` to that draft's validator, which counts
    no steps: the answer is checked as Draft 2020-12 (as its schema was), within the budget."""
    branch = {"type": "array", "items": {"$ref": "#/$defs/n"}}
    tree = {"$defs": {"n": {"anyOf": [branch, branch, {"type": "integer"}]}}, "$ref": "#/$defs/n"}
    deep: Any = "leaf"
    for _ in range(12):
        deep = [deep]  # every level fails both branches: 2**12 ways to try
    for schema in (tree, {"$schema": "http://json-schema.org/draft-07/schema#", **tree}):
        with pytest.raises(SchemaUnusable) as caught:
            check_answer(schema, deep, steps=20_000)
        assert str(caught.value).startswith(
            "checking the answer against the output schema took more than 20,000 steps (its anyOf, oneOf or $ref "
            "branches multiply with the answer's nesting: expected a simpler schema)"
        )
    check_answer(tree, [[[1]]], steps=20_000)


def test_a_reference_back_to_itself_makes_the_schema_unusable() -> None:
    with pytest.raises(SchemaUnusable, match=r"^the output schema cannot be applied: a \$ref leads back to itself"):
        check_answer({"$anchor": "me", "$ref": "#me"}, 1)


def test_an_answer_nested_too_deeply_is_told_to_the_model() -> None:
    nested: Any = 1
    for _ in range(65):
        nested = [nested]
    with pytest.raises(AnswerProblem, match=r"^the answer nests objects and arrays too deeply \(expected at most 64"):
        check_answer({}, nested)
    with pytest.raises(AnswerProblem, match=r"^the answer nests objects and arrays too deeply"):
        parse_answer("[" * 100_000 + "]" * 100_000)  # past Python's own JSON reader


SCHEMA_PROBLEMS = [
    pytest.param(
        {"pattern": "(?<=a)b"},
        [
            (
                ("pattern",),
                "the pattern '(?<=a)b' cannot be used: invalid perl operator: (?<=: lookbehind is not "
                "supported (RE2 syntax: no backreferences or lookaround)",
            )
        ],
        id="lookbehind",
    ),
    pytest.param(
        {"$defs": {"a": {"$id": "https://example.com/a", "$ref": "b"}}},
        [
            (
                ("$defs", "a", "$ref"),
                "$ref 'b' is outside this schema, and this server fetches no schema (expected "
                "a reference inside it, e.g. '#/$defs/<name>')",
            )
        ],
        id="relative-to-a-nested-id",
    ),
    pytest.param(
        {"properties": {"enum": {"$ref": "https://example.com/x"}}},
        [
            (
                ("properties", "enum", "$ref"),
                "$ref 'https://example.com/x' is outside this schema, and this server "
                "fetches no schema (expected a reference inside it, e.g. '#/$defs/<name>')",
            )
        ],
        id="property-named-like-a-keyword",
    ),
    pytest.param(
        {"$dynamicRef": "#/$defs/none"},
        [
            (
                ("$dynamicRef",),
                "$dynamicRef '#/$defs/none' points to nothing in this schema (expected e.g. '#/$defs/<name>')",
            )
        ],
        id="dynamic-ref",
    ),
    pytest.param(
        {"const": "\ud800"},
        [
            (
                ("const",),
                "the string '\\ud800' holds a lone surrogate, which is not Unicode text (expected a whole character)",
            )
        ],
        id="lone-surrogate",
    ),
]


@pytest.mark.parametrize(("schema", "found"), SCHEMA_PROBLEMS)
def test_a_schema_this_server_will_not_apply_is_named(schema: dict[str, Any], found: list[Any]) -> None:
    assert schema_problems(schema) == found


def test_references_inside_the_schema_are_followed_across_nested_ids() -> None:
    schema = {
        "$id": "https://example.com/root",
        "$defs": {"city": {"$id": "city", "$defs": {"name": {"type": "string"}}}},
        "properties": {"home": {"$ref": "city#/$defs/name"}, "enum": {"$ref": "#/$defs/city"}},
        "examples": [{"$ref": "https://example.com/data, not a reference"}],
    }
    assert schema_problems(schema) == []
    check_answer(schema, {"home": "Lima"})


@pytest.mark.parametrize(
    ("said", "read"),
    [
        ('```json\n{"a": 1}\n```', '{"a": 1}'),
        ("  ```JSON \r\n[1]\r\n  ```\n", "[1]"),
        ("```\n```", ""),
        ("x```json\n{}\n```", "x```json\n{}\n```"),
        ("```json {}```", "```json {}```"),
        ("```json\n" + " " * 100_000 + "x", "```json\n" + " " * 100_000 + "x"),
    ],
    ids=["json", "spaces-and-crlf", "empty", "text-before", "one-line", "long-and-open"],
)
def test_a_fenced_answer_is_read_without_a_regex(said: str, read: str) -> None:
    assert unfenced(said) == read


async def test_a_catastrophic_pattern_is_refused_at_once_and_corrected(rt: Runtime, fake: ScriptedModel) -> None:
    """`^(a+)+$` over 40 a's and a "!": Python's `re` would try 2**40 ways (hours), on the event loop."""
    schema = {"type": "object", "properties": {"name": {"type": "string", "pattern": "^(a+)+$"}}}
    asked = {"type": "json_schema", "json_schema": {"name": "Name", "schema": schema}}
    fake.enqueue(Reply(text=json.dumps({"name": "a" * 40 + "!"})), Reply(text='{"name": "aaa"}'))
    request = RunRequest("chat", ALICE, [{"role": "user", "content": "a name"}], chat_id="c1",
                         options={"response_format": asked})  # fmt: skip
    result = await runs_of(rt).run(request)
    assert (result.status, result.output) == ("completed", {"name": "aaa"})
    assert f"at $.name: '{'a' * 40}!' does not match '^(a+)+$'" in fake.requests[1].messages[-1]["content"]


@pytest.mark.parametrize(
    ("answer", "why"),
    [('{"amount": 1e999}', "beyond what a JSON number may hold"), ('{"to": "bob", "to": "eve"}', "'to'"),
     ('{"amount": NaN}', "NaN")],
)  # fmt: skip
def test_an_answer_other_readers_would_read_otherwise_is_sent_back(answer: str, why: str) -> None:
    """Python reads 1e999 as infinity and keeps the last of two keys; the client reading the answer may not."""
    with pytest.raises(AnswerProblem) as problem:
        parse_answer(answer)
    assert "not plain JSON" in str(problem.value) and why in str(problem.value)
