"""What makes a chat valid to send to any provider, checked on the stored chat and on every request.

CONTRACT §4.8: every tool call has exactly one result, matched by id, right after the assistant
message that made it; no result without its call; every call's arguments are a JSON object.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from yao_agent.messages import ChatMessage


def arguments_problem(text: str) -> str | None:
    """Why a call's arguments would be refused by a strict provider, or None."""
    try:
        value = json.loads(text)
    except ValueError:
        return f"arguments are not JSON: {text[:40]!r}"
    return None if isinstance(value, dict) else f"arguments are not an object: {text[:40]!r}"


def request_problems(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """Everything wrong with one provider request's messages (empty: valid)."""
    problems: list[str] = []
    waiting: list[str] = []  # the calls of the last assistant message still owed a result
    for index, message in enumerate(messages):
        role = message.get("role")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in waiting:
                problems.append(f"[{index}] result for {call_id!r}, which is not a call waiting for one")
            else:
                waiting.remove(call_id)
            continue
        if waiting:
            problems.append(f"[{index}] {role} message while calls {waiting} have no result")
        waiting = []
        for call in message.get("tool_calls") or ():
            waiting.append(call["id"])
            problem = arguments_problem(call["function"]["arguments"])
            if problem:
                problems.append(f"[{index}] {call['id']}: {problem}")
    if waiting:
        problems.append(f"end: calls {waiting} have no result")
    return problems


def stored_problems(history: Sequence[ChatMessage]) -> list[str]:
    """Everything wrong with a stored chat: each thread (a root run, a delegated or called child)
    must pair on its own, and every call id has exactly one result in the whole chat."""
    problems: list[str] = []
    threads: dict[str | None, list[dict[str, Any]]] = {}
    results: dict[str, int] = {}
    for message in history:
        if message.role == "assistant" and message.status == "incomplete":
            if message.tool_calls:
                problems.append(f"incomplete reply {message.id} stored with tool calls")
            continue
        if message.role == "tool" and message.tool_call_id is not None:
            results[message.tool_call_id] = results.get(message.tool_call_id, 0) + 1
        threads.setdefault(message.thread_id, []).append(message.to_provider())
    problems += [f"call {call_id} has {count} results" for call_id, count in results.items() if count > 1]
    for thread, messages in threads.items():
        problems += [f"thread {thread}: {p}" for p in request_problems(messages)]
    return problems
