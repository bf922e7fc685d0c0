"""History and the overlap dedupe: what a client resends is never stored twice."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.runtimes import stored, turn
from yao_agent.dsl import load_app
from yao_agent.messages import ChatMessage, ToolCall, provider_messages
from yao_agent.pipeline import Runtime
from yao_agent.pipeline.history import overlap
from yao_agent.store import SqlStore
from yao_agent.testing import Reply, ScriptedModel

U1, A1, U2, A2, U3 = (
    {"role": "user", "content": "one"},
    {"role": "assistant", "content": "reply one"},
    {"role": "user", "content": "two"},
    {"role": "assistant", "content": "reply two"},
    {"role": "user", "content": "three"},
)
IMAGE = {
    "role": "user",
    "content": [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "data:x"}}],
}


@pytest.mark.parametrize(
    ("history", "given", "expected"),
    [
        ([], [U1], 0),
        ([U1, A1], [U2], 0),  # no overlap
        ([U1, A1], [U1, A1, U2], 2),  # the client resent everything
        ([U1, A1, U2, A2], [U2, A2, U3], 2),  # partial: only the tail is repeated
        ([U1, A1], [U1, A1], 2),  # input equal to history
        ([U1, A1], [A1, U1], 1),  # the history's last message starts the input
        ([U1, A1], [U1, U2], 0),  # the input's first message is not the history's end
        ([IMAGE, A1], [IMAGE, A1, U2], 2),  # multimodal content compared by value
        ([{"role": "user", "content": [{"type": "text", "text": "one"}]}], [U1, U2], 1),  # one text part = text
    ],
)
def test_overlap(history: list[dict[str, Any]], given: list[dict[str, Any]], expected: int) -> None:
    assert overlap(history, given) == expected


def test_multimodal_parts_differing_by_value_do_not_overlap() -> None:
    other = {
        **IMAGE,
        "content": [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "data:y"}}],
    }
    assert overlap([IMAGE], [other]) == 0


async def test_a_client_resending_the_whole_conversation_for_five_turns(rt: Runtime, fake: ScriptedModel) -> None:
    conversation: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
    for n in range(5):
        fake.enqueue(Reply(text=f"reply {n}"))
        conversation.append({"role": "user", "content": f"question {n}"})
        await turn(rt, list(conversation))
        conversation.append({"role": "assistant", "content": f"reply {n}"})
    rows = await stored(rt)
    assert rows == [("system", "Be brief.", "completed")] + [
        row
        for n in range(5)
        for row in (("user", f"question {n}", "completed"), ("assistant", f"reply {n}", "completed"))
    ]
    # and the model saw each message once
    assert [m["content"] for m in fake.requests[-1].messages[1:]] == [m["content"] for m in conversation[:-1]]


async def test_input_equal_to_history_stores_nothing_new_from_the_input(rt: Runtime, fake: ScriptedModel) -> None:
    fake.enqueue(Reply(text="reply one"), Reply(text="again"))
    await turn(rt, "one")
    await turn(rt, [U1, A1])
    assert [r[1] for r in await stored(rt)] == ["one", "reply one", "again"]


async def test_multimodal_input_is_stored_once(rt: Runtime, fake: ScriptedModel) -> None:
    model = rt.app.root / "connectors/fake/model.yml"
    model.write_text(model.read_text() + "capabilities: {vision: true}\n")  # images go only to models that see
    rt.app = load_app(rt.app.root)
    fake.enqueue(Reply(text="reply one"), Reply(text="reply two"))
    await turn(rt, [IMAGE])
    await turn(rt, [IMAGE, A1, U2])
    assert [r[1] for r in await stored(rt)] == [IMAGE["content"], "reply one", "two", "reply two"]


def test_history_pairs_calls_and_results_and_drops_incomplete_replies() -> None:
    call = ToolCall("c1", "weather__forecast", "{}")
    history = [
        ChatMessage("m0", "tool", "orphan result", tool_call_id="c0"),  # its call fell out of the window
        ChatMessage("m1", "user", "weather?"),
        ChatMessage("m2", "assistant", None, tool_calls=(call,)),  # its result was never stored
        ChatMessage("m3", "user", "hello?"),
        ChatMessage("m4", "assistant", "half an ans", status="incomplete"),
    ]
    assert provider_messages(history) == [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None, "tool_calls": [call.to_provider()]},
        {"role": "tool", "tool_call_id": "c1", "content": "failed: no result was recorded for this tool call"},
        {"role": "user", "content": "hello?"},
    ]


class BrokenHistory(SqlStore):
    """A store whose history cannot be read (the disk it is on has failed)."""

    def read_history(self, *args: object, **kwargs: object) -> list[ChatMessage]:
        raise OSError("disk on fire")


async def test_a_history_load_failure_warns_and_continues_without_history(
    rt: Runtime, fake: ScriptedModel, caplog: pytest.LogCaptureFixture
) -> None:
    fake.enqueue(Reply(text="first"), Reply(text="second"))
    await turn(rt, "one")
    rt.store = BrokenHistory(rt.store.db)
    events = await turn(rt, "two")
    assert events[-1].type == "stream_end" and events[-1].status == "completed"
    assert fake.requests[1].messages[1:] == [{"role": "user", "content": "two"}]
    assert "history of chat c1 could not be loaded" in caplog.text
