"""An assistant's `output` (structured output): its schema must itself be a JSON Schema, said at load with
file, line and the place inside the schema, like every other mistake in an app's files."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.apps import make_app
from yao_agent.dsl import check_app, load_app
from yao_agent.dsl.specs import OutputSpec

FILE = "assistants/chat/assistant.yml"


def errors(root: Path, assistant: str) -> list[str]:
    make_app(root, {FILE: assistant})
    return [str(p) for p in check_app(root).errors]


def test_an_output_schema_loads_with_its_retries(tmp_path: Path) -> None:
    make_app(tmp_path, {FILE: "name: Chat\noutput:\n  schema: {type: object, required: [city]}\n  retries: 4\n"})
    assert load_app(tmp_path).assistants["chat"].output == OutputSpec({"type": "object", "required": ["city"]}, 4)


def test_retries_default_to_two_and_no_output_is_none(tmp_path: Path) -> None:
    make_app(tmp_path, {FILE: "name: Chat\noutput: {schema: {}}\n", "assistants/plain/assistant.yml": "name: P\n"})
    app = load_app(tmp_path)
    assert app.assistants["chat"].output == OutputSpec({}, 2)
    assert app.assistants["plain"].output is None


def test_a_misspelt_type_names_its_place_in_the_schema(tmp_path: Path) -> None:
    assistant = "name: Chat\noutput:\n  schema:\n    type: object\n    properties:\n      city: {type: strnig}\n"
    assert errors(tmp_path, assistant) == [
        f"{FILE}:6 output.schema.properties.city.type: not a valid JSON Schema (Draft 2020-12): 'strnig' is not "
        "valid under any of the given schemas (expected string, number, integer, boolean, object, array, null, "
        "or a list of them)"
    ]


def test_every_mistake_of_a_schema_is_named_at_once(tmp_path: Path) -> None:
    assistant = """\
        name: Chat
        output:
          schema:
            type: object
            required: city
            properties:
              zip: {pattern: '[0-9'}
              days: {type: array, minItems: -1}
    """
    assert errors(tmp_path, assistant) == [
        f"{FILE}:5 output.schema.required: not a valid JSON Schema (Draft 2020-12): 'city' is not of type 'array'",
        f"{FILE}:7 output.schema.properties.zip.pattern: the pattern '[0-9' cannot be used: missing ]: [0-9 "
        "(RE2 syntax: no backreferences or lookaround)",
        f"{FILE}:8 output.schema.properties.days.minItems: not a valid JSON Schema (Draft 2020-12): "
        "-1 is less than the minimum of 0",
    ]


def test_a_reference_to_nothing_is_named(tmp_path: Path) -> None:
    assistant = """\
        name: Chat
        output:
          schema:
            $defs: {city: {type: string}}
            properties:
              home: {$ref: '#/$defs/city'}
              work: {$ref: '#/$defs/town'}
    """
    assert errors(tmp_path, assistant) == [
        f"{FILE}:7 output.schema.properties.work.$ref: $ref '#/$defs/town' points to nothing in this schema "
        "(expected e.g. '#/$defs/<name>')"
    ]


def test_a_yaml_value_json_has_not_is_named(tmp_path: Path) -> None:
    assistant = "name: Chat\noutput:\n  schema:\n    properties:\n      day: {const: 2024-05-01}\n"
    assert errors(tmp_path, assistant) == [
        f"{FILE}:5 output.schema.properties.day.const: a YAML date is not a JSON value (expected a string: quote it)"
    ]


def test_an_authors_schema_is_held_to_a_requests_rules(tmp_path: Path) -> None:
    """The rules a request's `response_format` is held to (patterns RE2 runs, no remote `$ref`), said at
    load with file and line, for `output.schema` and `options.response_format` alike. (Depth: no app file
    nests more than 64 levels, source.py.)"""
    assistant = """\
        name: Chat
        output:
          schema:
            properties:
              code: {pattern: '^(\\w)\\1$'}
        options:
          response_format:
            type: json_schema
            json_schema:
              name: city
              schema:
                properties:
                  city: {$ref: 'https://schemas.example.com/city.json'}
    """
    assert errors(tmp_path, assistant) == [
        f"{FILE}:5 output.schema.properties.code.pattern: the pattern '^(\\\\w)\\\\1$' cannot be used: "
        "invalid escape sequence: \\1: backreferences are not supported (RE2 syntax: no backreferences or lookaround)",
        f"{FILE}:13 options.response_format.json_schema.schema.properties.city.$ref: $ref "
        "'https://schemas.example.com/city.json' is outside this schema, and this server fetches no schema "
        "(expected a reference inside it, e.g. '#/$defs/<name>')",
    ]


@pytest.mark.parametrize(
    ("output", "said"),
    [
        ("{retries: 2}", "4 output: missing required key 'schema'"),
        ("{schema: [type, object]}", "4 output.schema: wrong type: got list (expected mapping)"),
        ("{schema: {}, retries: -1}", "4 output.retries: -1 is too small (expected at least 0)"),
        ("{schema: {}, retry: 3}", "4 output.retry: unknown key 'retry'"),
    ],
)
def test_the_output_block_itself_is_checked(tmp_path: Path, output: str, said: str) -> None:
    [error] = errors(tmp_path, f"name: Chat\ndescription: d\nprompts: []\noutput: {output}\n")
    assert error.startswith(f"{FILE}:{said}"), error
