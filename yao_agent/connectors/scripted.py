"""The `scripted` connector: an offline, deterministic stand-in for a model, driven by YAML rules.

Rules are tried in order; the first whose `match` fits the conversation answers with text, tool
calls or a provider-like error. Templates see `last_user`, `last_message`, `messages`, `match`
(the named groups of the `user` regex), `tool_results` (the tool messages after the last assistant
turn) and `now`. The reply is streamed in `chunk_size` pieces, like a model's, with usage.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

from yao_agent.dsl.specs import ConnectorSpec, ScriptRule
from yao_agent.dsl.templates import render


@dataclass(frozen=True, slots=True)
class ScriptedReply:
    reasoning: str = ""
    text: str = ""
    tool_calls: tuple[tuple[str, str], ...] = ()  # (name, arguments as JSON text)
    error_status: int | None = None
    error_message: str = ""
    usage: Mapping[str, int] = field(default_factory=dict[str, int])


class NoRuleMatched(Exception):
    """No rule of the script fits the conversation: a mistake in the script, reported as a bad request."""


def text_of(content: object) -> str:
    """The text of a message's content, whether a string or a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = cast(list[Any], content)
        texts = [cast(Mapping[str, Any], p).get("text", "") for p in parts if isinstance(p, Mapping)]
        return "".join(str(t) for t in texts)
    return ""


def plan_reply(
    connector: ConnectorSpec, messages: Sequence[Mapping[str, Any]], now: datetime | None = None
) -> ScriptedReply:
    last = messages[-1] if messages else {"role": "user", "content": ""}
    last_user = next((text_of(m.get("content")) for m in reversed(messages) if m.get("role") == "user"), "")
    for rule in connector.rules:
        found = _match(rule, str(last.get("role", "")), last_user)
        if found is None:
            continue
        variables = {
            "last_user": last_user,
            "last_message": {"role": last.get("role"), "content": text_of(last.get("content"))},
            "messages": [{"role": m.get("role"), "content": text_of(m.get("content"))} for m in messages],
            "match": found,
            "tool_results": _tool_results(messages),
            "now": now or datetime.now(UTC),
        }
        return _answer(rule, variables, messages, f"{connector.file}:{rule.line}")
    raise NoRuleMatched(
        f"no rule of scripted connector {connector.id} ({connector.file}) matches the last message "
        f"(role {last.get('role')!r}, text {last_user[:60]!r})"
    )


def _match(rule: ScriptRule, role: str, last_user: str) -> dict[str, str] | None:
    if rule.role is not None and rule.role != role:
        return None
    if rule.user is None:
        return {}
    found = rule.user.search(last_user)
    if found is None:
        return None
    return {k: v for k, v in found.groupdict().items() if v is not None}


def _tool_results(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    results: list[str] = []
    for message in reversed(messages):
        if message.get("role") != "tool":
            break
        results.append(text_of(message.get("content")))
    return results[::-1]


def _answer(
    rule: ScriptRule, variables: Mapping[str, Any], messages: Sequence[Mapping[str, Any]], origin: str
) -> ScriptedReply:
    if rule.error_status is not None:
        return ScriptedReply(error_status=rule.error_status, error_message=rule.error_message or "scripted error")
    reasoning = render(rule.reasoning, variables, origin) if rule.reasoning else ""
    text = render(rule.reply, variables, origin) if rule.reply else ""
    calls = tuple((c.name, json.dumps(_render_arguments(c.arguments, variables, origin))) for c in rule.tool_calls)
    prompt = sum(len(text_of(m.get("content"))) for m in messages) // 4 + len(messages)
    completion = (len(reasoning) + len(text) + sum(len(a) for _, a in calls)) // 4 + 1
    usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    return ScriptedReply(reasoning=reasoning, text=text, tool_calls=calls, usage=usage)


def _render_arguments(value: Any, variables: Mapping[str, Any], origin: str) -> Any:
    if isinstance(value, str):
        return render(value, variables, origin)
    if isinstance(value, Mapping):
        return {k: _render_arguments(v, variables, origin) for k, v in cast(Mapping[str, Any], value).items()}
    if isinstance(value, list):
        return [_render_arguments(v, variables, origin) for v in cast(list[Any], value)]
    return value


def pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] if text else []
