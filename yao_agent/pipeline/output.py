"""Structured output (CONTRACT §4 item 7): the schema a run's final answer must fit, how the model learns
it, and the check made where a reply would finish the run.

The schema comes from the first of:

1. the run's own `response_format` option: an OpenAI-compatible request's (or one a Create hook set) —
   the caller asked for this answer, so it wins over what the assistant declares;
2. the assistant's `output.schema`;
3. the assistant's `options.response_format`.

A `json_schema` format gives its schema (`{}`, any JSON, when it gives none); `json_object` gives
`{"type": "object"}`, what OpenAI's JSON mode promises; `text` gives none, and nothing is checked.
`retries` is the assistant's `output.retries` (2 without an `output`).

The model is told the schema by the call's `response_format` option, which the connector's capabilities
turn into the provider's structured-output parameter or a system instruction (connectors/capabilities.py).

Only the root run's final answer is checked. A child run's answer (a hand-over's, a `ctx.call`'s) is
its parent's business: a hand-over's reply becomes the root's final answer, and is checked as that.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from yao_agent.base.jsonvalue import as_mapping
from yao_agent.base.structured import AnswerProblem, SchemaUnusable, check_answer, parse_answer, place, schema_problems
from yao_agent.connectors import CallOptions
from yao_agent.errors import OutputError
from yao_agent.messages import text_of
from yao_agent.pipeline.state import RunState

DEFAULT_RETRIES = 2
CORRECTION = (
    "Your last answer does not fit the required output format: {problem}. Answer again with the corrected "
    "answer: one JSON value only, no other text, valid against this JSON Schema: {schema}"
)


@dataclass(frozen=True, slots=True)
class Expected:
    """What a run's final answer must be: JSON valid against `schema`, after at most `retries` corrections."""

    schema: Mapping[str, Any]
    retries: int


def response_format(state: RunState) -> dict[str, Any] | None:
    """The `response_format` of the run's model calls (see the module's doc for which one wins)."""
    given = state.options.call.response_format
    if given is not None:
        return dict(given)
    spec = state.assistant
    if spec.output is not None:
        schema = {"name": format_name(spec.id), "schema": dict(spec.output.schema)}
        return {"type": "json_schema", "json_schema": schema}
    given = CallOptions.of(spec.options).response_format
    return dict(given) if given is not None else None


def format_name(assistant_id: str) -> str:
    """The assistant's id as OpenAI's `json_schema.name` allows it (letters, digits, `_`, `-`; 64 at most)."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", assistant_id)[:64] or "output"


def expected(state: RunState) -> Expected | None:
    """The run's output schema and retries; None when its answer is free text."""
    given = response_format(state)
    kind = given.get("type") if given is not None else None
    if given is None or kind not in ("json_schema", "json_object"):
        return None
    schema = as_mapping(as_mapping(given.get("json_schema")).get("schema")) if kind == "json_schema" else None
    output = state.assistant.output
    return Expected(schema if schema is not None else {"type": "object"},
                    output.retries if output is not None else DEFAULT_RETRIES)  # fmt: skip


async def check(state: RunState) -> tuple[dict[str, Any], ...] | None:
    """Where the run would finish: None when there is nothing to check or the final answer fits (its value
    is kept for `stream_end.output`); else the correction to say for one more model turn. OutputError when
    no retry is left, or no retry can help."""
    wanted = expected(state) if state.parent is None else None
    if wanted is None:
        return None
    answer = final_answer(state)
    try:
        # Off the event loop: a large answer against a large schema takes seconds of CPU, which there would
        # stop every other run and request. The check bounds itself (MAX_STEPS, patterns on RE2), so the
        # thread always ends; a thread rather than a process, since a schema and an answer are in memory
        # here and a process would have to start and be sent both.
        value = await asyncio.to_thread(_fitting, wanted.schema, answer)
    except SchemaUnusable as exc:
        raise OutputError(str(exc)) from None
    except AnswerProblem as exc:
        if state.output_retries >= wanted.retries:
            tries = f"{wanted.retries} correction{'s' if wanted.retries != 1 else ''}"
            raise OutputError(f"the final answer is not valid against the output schema after {tries}: {exc}") from None
        state.output_retries += 1
        shown = json.dumps(wanted.schema, ensure_ascii=False, separators=(",", ":"))
        # As the user's turn: a conversation that ended on the model's reply and a system message would, for
        # providers that lift system messages out (Anthropic), end on the reply, which they take as a prefill.
        return ({"role": "user", "content": CORRECTION.format(problem=exc, schema=shown)},)
    state.output = value
    return None


def _fitting(schema: Mapping[str, Any], answer: str) -> Any:
    """The answer's JSON value when it fits `schema`; else AnswerProblem, or SchemaUnusable."""
    unusable = schema_problems(schema)
    if unusable:  # a schema from a hook or the assistant's options, which nothing checked before
        where, message = unusable[0]
        raise SchemaUnusable(f"the output schema is not usable: at {place(where)}: {message}")
    value = parse_answer(answer)
    check_answer(schema, value)
    return value


def final_answer(state: RunState) -> str:
    """The reply that ends the run: the last message of its conversation, a reply that asks for no tools."""
    last = state.conversation[-1] if state.conversation else {}
    if last.get("role") != "assistant" or last.get("tool_calls"):
        raise OutputError("the run ended without a final answer to check against the output schema "
                          f"(its last message is {_described(last)})")  # fmt: skip
    return text_of(last.get("content"))


def _described(message: Mapping[str, Any]) -> str:
    if not message:
        return "none"
    if message.get("tool_calls"):
        return "a reply asking for tools"
    return f"a {message.get('role')} message"
