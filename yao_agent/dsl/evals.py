"""An app's evals: `evals/<path>.yml`, built and cross-checked (CONTRACT §9.4).

Beyond what the schema says: the assistant must exist, `judge_with` must name a connector (or role) that
can chat and must be there when a case asks for a `judge`, case names are unique in their file, and a
`regex` or `json_schema` expectation must itself be valid — a broken check is a problem of the file,
never a failed case.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from yao_agent.base import safe_regex, structured
from yao_agent.errors import Problem

from .checks import items, mapping
from .refs import Known, chat_target, connector_ref, unknown
from .source import Document
from .specs import EvalCase, EvalSpec

Data = Mapping[str, Any]


def build_eval(eval_id: str, doc: Document) -> EvalSpec:
    data: Data = doc.value
    cases = tuple(
        EvalCase(case["name"], _messages(case["input"]), tuple(case.get("expect", [])), doc.line(("cases", index)))
        for index, case in enumerate(cast(list[Data], data["cases"]))
    )
    return EvalSpec(id=eval_id, file=doc.file, assistant=data["assistant"], cases=cases,
                    judge_with=data.get("judge_with"), repeat=data.get("repeat", 1),
                    concurrency=data.get("concurrency", 4))  # fmt: skip


def _messages(given: str | list[Data]) -> tuple[Mapping[str, Any], ...]:
    if isinstance(given, str):
        return ({"role": "user", "content": given},)
    return tuple(dict(m) for m in given)


def check_eval(doc: Document, known: Known) -> list[Problem]:
    """Its references (the assistant, the judge) and its checks' own validity."""
    data = mapping(doc.value)
    problems: list[Problem] = []
    assistant = data.get("assistant")
    if isinstance(assistant, str) and assistant not in known.assistants:
        problems.append(doc.problem(("assistant",), unknown("assistant", assistant, known.assistants)))
    judge = data.get("judge_with")
    if judge is not None:
        problems += connector_ref(doc, judge, known, ("judge_with",))
        problems += chat_target(doc, judge, known, ("judge_with",))
    names: set[str] = set()
    for index, case in items(data.get("cases")):
        case_data = mapping(case)
        name = case_data.get("name")
        if isinstance(name, str) and name in names:
            twice = f"case '{name}' is named twice (expected unique names)"
            problems.append(doc.problem(("cases", index, "name"), twice))
        names.add(name if isinstance(name, str) else "")
        for number, expectation in items(case_data.get("expect")):
            problems += _check_expectation(doc, ("cases", index, "expect", number), mapping(expectation), judge)
        messages = case_data.get("input")
        if isinstance(messages, list) and mapping(cast(list[Any], messages)[-1]).get("role") != "user":
            problems.append(doc.problem(("cases", index, "input"), "the conversation must end with the user's message"))
    return problems


def _check_expectation(doc: Document, path: tuple[str | int, ...], expectation: Data, judge: object) -> list[Problem]:
    pattern, schema = expectation.get("regex"), expectation.get("json_schema")
    if isinstance(pattern, str) and (why := safe_regex.problem(pattern)) is not None:
        return [doc.problem((*path, "regex"), why)]
    if isinstance(schema, dict):
        found = structured.schema_problems(cast(Data, schema))
        if found:
            where, why = found[0]
            return [doc.problem((*path, "json_schema", *where), why)]
    if "judge" in expectation and judge is None:
        return [doc.problem((*path, "judge"), "a judge expectation needs `judge_with` (a connector or use::<role>)")]
    return []
