"""Each step's input, typed (store/step_inputs.py), reads what the store holds and writes it back unchanged:
a row stored before the inputs were typed is read as one stored now."""

from __future__ import annotations

import json
from typing import Any

import pytest

from yao_agent.messages import ToolCall
from yao_agent.store import step_inputs
from yao_agent.store.step_inputs import Answered, ChildRun, HookCall, ModelCall, ToolRound, Truncated
from yao_agent.vocabulary import StepType

pytestmark = pytest.mark.both_stores  # what it tests is what the database does

ASKED = [{"role": "user", "content": "hi"}]
TOOL: dict[str, Any] = {"type": "function", "function": {"name": "t__x", "description": "", "parameters": {}}}

STORED: list[tuple[StepType, Any, Any]] = [  # (kind, as stored, as typed)
    ("llm", {"messages": ASKED, "tools": [TOOL], "options": {"max_tokens": 5, "temperature": 0.1},
             "connectors": ["a", "b"]},
     ModelCall(ASKED, {"max_tokens": 5, "temperature": 0.1}, ("a", "b"), [TOOL])),
    ("llm", {"messages": ASKED, "options": {"max_tokens": 256}, "connectors": ["a"]},  # a summary call
     ModelCall(ASKED, {"max_tokens": 256}, ("a",))),
    ("llm", {"resume": "answered", "message_id": "msg_1"}, Answered("msg_1")),
    ("tool", {"calls": [{"id": "c1", "name": "t__x", "arguments": "{\"n\": 1}"}], "attempt": 2},
     ToolRound((ToolCall("c1", "t__x", '{"n": 1}'),), 2)),
    ("tool", {"calls": [{"id": "c1", "name": "t__x", "arguments": "{\"oops\": "}], "attempt": 1,
              "require_approval": ["t__x"]},  # what the model wrote, not a JSON object: kept as it was
     ToolRound((ToolCall("c1", "t__x", "{}", invalid='{"oops": '),), 1, ("t__x",))),
    ("hook_create", {"function": "Create", "args": [ASKED, {"connector": "a", "locale": "en"}]},
     HookCall("Create", [ASKED, {"connector": "a", "locale": "en"}])),
    ("hook_next", {"truncated": True, "json_chars": 70000}, Truncated(70000)),
    ("hook_next", {"truncated": True, "reason": "no JSON form"}, Truncated()),
    ("delegate", {"assistant_id": "helper", "messages": None, "via": "delegate", "from_thread": None},
     ChildRun("helper", None, "delegate", None)),
    ("delegate", {"assistant_id": "helper", "messages": ASKED, "via": "call", "from_thread": "thread_1"},
     ChildRun("helper", ASKED, "call", "thread_1")),
]  # fmt: skip


@pytest.mark.parametrize(("kind", "stored", "typed"), STORED)
def test_a_stored_input_reads_typed_and_is_written_back_as_it_was(kind: StepType, stored: Any, typed: Any) -> None:
    given = step_inputs.read(kind, json.loads(json.dumps(stored)))
    assert given == typed
    assert json.dumps(step_inputs.to_json(given)) == json.dumps(stored)  # the same keys, in the same order


def test_no_input_is_none_and_a_mangled_one_reads_as_little_as_it_says() -> None:
    assert step_inputs.read("tool", None) is None and step_inputs.to_json(None) is None
    assert step_inputs.read("tool", {"calls": "no", "attempt": True}) == ToolRound((), 1)
    assert step_inputs.read("delegate", {"via": "teleport"}) == ChildRun("None", None, "delegate", None)
