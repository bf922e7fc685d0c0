"""A resume goes on from a reply that broke off (pipeline/cut.py): the request ends with the cut text and a
request to go on, the new message `continues` the cut one, its deltas carry only the new text, and the
chat's history holds the text once."""

from __future__ import annotations

from pathlib import Path

from tests.support.hooks import hooked
from tests.support.runtimes import ALICE, app_files, close, end_of, make_runtime, runs_of, turn
from yao_agent.events import Event, MessageDelta, MessageEnd, MessageStart
from yao_agent.messages import ChatMessage
from yao_agent.pipeline import RunRequest, Runtime
from yao_agent.pipeline.llm import CONTINUE_PROMPT, RESUME_PROMPT
from yao_agent.store import SqlStore
from yao_agent.testing import Reply, ScriptedModel, ToolCall

GO_ON = {"role": "user", "content": RESUME_PROMPT}


async def cancelled_after(rt: Runtime, text: str, deltas: int, chat_id: str = "c1") -> list[Event]:
    """A turn whose reply is cancelled once `deltas` pieces of its text were streamed."""
    handle = await runs_of(rt).start(RunRequest("chat", ALICE, [{"role": "user", "content": text}], chat_id=chat_id))
    events: list[Event] = []
    seen = 0
    async for event in handle.events():
        events.append(event)
        if isinstance(event, MessageDelta):
            seen += 1
            if seen == deltas:
                handle.cancel()
    return events


async def resumed(rt: Runtime, chat_id: str = "c1") -> list[Event]:
    handle = await runs_of(rt).resume(ALICE, chat_id)
    return [e async for e in handle.events()]


async def messages(rt: Runtime, chat_id: str = "c1") -> list[ChatMessage]:
    return [m for m in await runs_of(rt).messages(ALICE, chat_id) if m.role == "assistant"]


def texts(events: list[Event]) -> tuple[list[MessageStart], str, list[MessageEnd]]:
    """The text messages' starts, their deltas joined, and their ends."""
    starts = [e for e in events if isinstance(e, MessageStart) and e.kind == "text"]
    said = "".join(e.text or "" for e in events if isinstance(e, MessageDelta) and e.kind == "text")
    return starts, said, [e for e in events if isinstance(e, MessageEnd) and e.kind == "text"]


async def test_a_cancelled_reply_is_continued_where_it_stopped(rt: Runtime, fake: ScriptedModel) -> None:
    fake.enqueue(Reply(text="The quick brown fox jumps over the lazy dog", chunk_size=4, delay_s=0.02),
                 Reply(text=" over the lazy dog.", chunk_size=4), Reply(text="Yes."))  # fmt: skip
    first = await cancelled_after(rt, "a sentence please", 3)
    assert end_of(first).reason == "cancelled"
    [cut] = await messages(rt)
    assert (cut.content, cut.status, cut.continues) == ("The quick br", "incomplete", None)
    await fake.wait_for_disconnects(1)
    events = await resumed(rt)
    assert (end_of(events).status, end_of(events).reason) == ("completed", "completed")
    asked = fake.requests[-1].messages
    assert asked[-2:] == [{"role": "assistant", "content": "The quick br"}, GO_ON]
    assert asked[:-2] == fake.requests[0].messages  # the conversation as first asked, no fragment in it
    [start], said, [done] = texts(events)
    assert start.continues == cut.id and start.message_id != cut.id
    assert said == " over the lazy dog."  # only the new text: the client shows the cut text already
    assert (done.message_id, done.content, done.status) == (start.message_id, "The quick br over the lazy dog.",
                                                            "completed")  # fmt: skip
    kept, whole = await messages(rt)
    assert (kept.id, kept.content, kept.status) == (cut.id, "The quick br", "incomplete")  # nothing is deleted
    assert (whole.id, whole.content, whole.status, whole.continues) == (
        start.message_id, "The quick br over the lazy dog.", "completed", cut.id)  # fmt: skip
    assert whole.to_api().get("continues") == cut.id and "continues" not in kept.to_api()
    await turn(rt, "thanks")
    later = fake.requests[-1].messages
    assert [m for m in later if m["role"] == "assistant"] == [
        {"role": "assistant", "content": "The quick br over the lazy dog."}
    ]  # the text once, never the fragment
    assert RESUME_PROMPT not in str(later)


async def test_a_reply_the_provider_dropped_is_continued(rt: Runtime, fake: ScriptedModel) -> None:
    fake.enqueue(Reply(text="The answer is forty-two", chunk_size=4, drop_after=3), Reply(text="er is 42."))
    assert end_of(await turn(rt, "question")).reason == "model_error"
    events = await resumed(rt)
    assert fake.requests[-1].messages[-2:] == [{"role": "assistant", "content": "The answ"}, GO_ON]
    [start], said, [done] = texts(events)
    assert (said, done.content) == ("er is 42.", "The answer is 42.")
    [cut, whole] = await messages(rt)
    assert start.continues == cut.id == whole.continues and whole.content == "The answer is 42."


async def test_a_continuation_cut_again_is_continued_from_the_whole_text(rt: Runtime, fake: ScriptedModel) -> None:
    fake.enqueue(Reply(text="one two three four", chunk_size=4, drop_after=2),
                 Reply(text=" two three four five", chunk_size=5, drop_after=3),
                 Reply(text="e four five."))  # fmt: skip
    await turn(rt, "count")
    second = await resumed(rt)
    assert end_of(second).reason == "model_error"
    [cut, again] = await messages(rt)
    assert (cut.content, again.content, again.status, again.continues) == (
        "one ", "one  two three", "incomplete", cut.id)  # fmt: skip
    assert texts(second)[1] == " two three"
    third = await resumed(rt)
    assert fake.requests[-1].messages[-2:] == [{"role": "assistant", "content": "one  two three"}, GO_ON]
    [start], said, [done] = texts(third)
    assert (start.continues, said, done.content) == (again.id, "e four five.", "one  two threee four five.")
    *_, whole = await messages(rt)
    assert (whole.continues, whole.status) == (again.id, "completed")
    await turn(rt, "next")
    assistant = [m["content"] for m in fake.requests[-1].messages if m["role"] == "assistant"]
    assert assistant == ["one  two threee four five."]


async def test_a_resume_that_fails_before_any_text_still_continues_the_same_cut_reply(
    rt: Runtime, fake: ScriptedModel
) -> None:
    fake.enqueue(Reply(text="Half of it", chunk_size=5, drop_after=2), Reply(status=500), Reply(text=" and more."))
    await turn(rt, "go")
    assert end_of(await resumed(rt)).reason == "model_error"  # nothing new shown, nothing stored
    [cut] = await messages(rt)
    events = await resumed(rt)
    assert fake.requests[-1].messages[-2:] == [{"role": "assistant", "content": "Half "}, GO_ON]
    [start], _, [done] = texts(events)
    assert (start.continues, done.content) == (cut.id, "Half  and more.")


async def test_a_cut_reply_without_text_is_asked_for_again_whole(rt: Runtime, fake: ScriptedModel) -> None:
    fake.enqueue(Reply(text="   \n  then words", chunk_size=3, drop_after=2), Reply(text="Fresh."))
    await turn(rt, "go")
    [cut] = await messages(rt)
    assert (cut.content, cut.status) == ("   ", "incomplete")
    events = await resumed(rt)
    assert fake.requests[-1].messages == fake.requests[0].messages  # as today: the same request again
    [start], said, [done] = texts(events)
    assert (start.continues, said, done.content) == (None, "Fresh.", "Fresh.")
    assert (await messages(rt))[-1].continues is None


async def test_a_reply_cut_while_calling_a_tool_is_asked_for_again_whole(rt: Runtime, fake: ScriptedModel) -> None:
    calling = Reply(text="Let me look that up.", tool_calls=(ToolCall("lookup", {"q": "x" * 40}),), chunk_size=5,
                    drop_after=6)  # fmt: skip
    fake.enqueue(calling, Reply(text="Fresh."))
    await turn(rt, "look it up")
    [cut] = await messages(rt)
    assert (cut.content, cut.status) == ("Let me look that up.", "incomplete")
    events = await resumed(rt)
    assert fake.requests[-1].messages == fake.requests[0].messages
    assert texts(events)[0][0].continues is None


async def test_a_message_sent_after_the_cut_reply_is_answered_instead(rt: Runtime, fake: ScriptedModel) -> None:
    fake.enqueue(Reply(text="z" * 200, chunk_size=2, delay_s=0.02), Reply(text="To both."))
    handle = await runs_of(rt).start(RunRequest("chat", ALICE, [{"role": "user", "content": "long"}], chat_id="c1"))
    seen = 0
    async for event in handle.events():
        if isinstance(event, MessageDelta):
            seen += 1
            if seen == 2:
                await runs_of(rt).append(ALICE, "c1", [{"role": "user", "content": "and also"}])
                handle.cancel()
    events = await resumed(rt)
    assert fake.requests[-1].messages[-1] == {"role": "user", "content": "and also"}
    assert texts(events)[0][0].continues is None


async def test_the_output_limit_still_continues_a_resumed_reply(rt: Runtime, fake: ScriptedModel) -> None:
    fake.enqueue(Reply(text="Once upon a time", chunk_size=5, drop_after=2),
                 Reply(text="pon a ", finish_reason="length"), Reply(text="time."))  # fmt: skip
    await turn(rt, "a story")
    events = await resumed(rt)
    base = fake.requests[0].messages
    assert fake.requests[1].messages == [*base, {"role": "assistant", "content": "Once "}, GO_ON]
    assert fake.requests[2].messages == [*base, {"role": "assistant", "content": "Once "}, GO_ON,
                                         {"role": "assistant", "content": "pon a "},
                                         {"role": "user", "content": CONTINUE_PROMPT}]  # fmt: skip
    [start], said, [done] = texts(events)
    assert (said, done.content) == ("pon a time.", "Once pon a time.")
    whole = (await messages(rt))[-1]
    assert (whole.id, whole.content, whole.status) == (start.message_id, "Once pon a time.", "completed")


async def test_output_guardrails_check_the_continuation_and_never_send_the_cut_text_again(
    tmp_path: Path, store: SqlStore, fake: ScriptedModel
) -> None:
    files = app_files(fake.base_url)
    files["app.yml"] += "guardrails:\n  output: [{pii: [email]}]\n"
    rt = make_runtime(tmp_path / "app", store, files, model=fake)
    answer = "Our support desk reads every message and answers within a day, often faster. Write to the desk."
    shown = answer[:90]  # five chunks of 18, then the connection drops
    fake.enqueue(Reply(text=answer, chunk_size=18, drop_after=6),
                 Reply(text="sk at help@example.com today.", chunk_size=4))  # fmt: skip
    await turn(rt, "who do I write to?")  # (64 characters held back on the stream: the cut sends them, checked)
    [cut] = await messages(rt)
    assert cut.content == shown
    events = await resumed(rt)
    [start], said, [done] = texts(events)
    assert start.continues == cut.id
    assert said == "sk at [email] today."  # masked, and the cut text is not sent a second time
    assert done.content == shown + "sk at [email] today."
    assert (await messages(rt))[-1].content == shown + "sk at [email] today."
    await rt.engines.aclose()


async def test_a_continuation_that_only_calls_a_tool_still_ends_the_cut_text(rt: Runtime, fake: ScriptedModel) -> None:
    fake.enqueue(Reply(text="Checking the", chunk_size=4, drop_after=2),
                 Reply(tool_calls=(ToolCall("lookup", {"q": "x"}),)), Reply(text="Done."))  # fmt: skip
    await turn(rt, "check")
    events = await resumed(rt)
    [start], said, [done] = texts(events)
    [cut, whole, *_] = await messages(rt)
    assert (start.continues, said, done.content) == (cut.id, "", "Chec")
    assert (whole.content, [c.name for c in whole.tool_calls], whole.continues) == ("Chec", ["lookup"], cut.id)


async def test_a_delegated_childs_cut_reply_is_continued_in_its_thread(
    tmp_path: Path, store: SqlStore, fake: ScriptedModel
) -> None:
    rt = make_runtime(tmp_path / "app", store, hooked(fake, "", more={
        "hooks/front.js": "function Create() { return {delegate: {assistant_id: 'expert', messages: "
                          "[{role: 'user', content: 'greet them'}]}} }\n",
        "assistants/front/assistant.yml": "name: Front\nhook: hooks/front.js\n",
        "assistants/expert/assistant.yml": "name: Expert\n",
    }), model=fake)  # fmt: skip
    fake.enqueue(Reply(text="The expert says hello", chunk_size=4, drop_after=3), Reply(text="rt says hello."))
    assert end_of(await turn(rt, "ask the expert", assistant="front")).reason == "model_error"
    [cut] = await messages(rt)
    assert (cut.content, cut.thread_id is not None) == ("The expe", True)
    events = await resumed(rt)
    asked = fake.requests[-1].messages
    assert asked[-2:] == [{"role": "assistant", "content": "The expe"}, GO_ON]
    assert asked.count({"role": "assistant", "content": "The expe"}) == 1  # not also in the child's history
    [start], said, [done] = texts(events)
    assert (start.continues, start.thread_id, said) == (cut.id, cut.thread_id, "rt says hello.")
    assert (end_of(events).status, done.content) == ("completed", "The expert says hello.")
    await close(rt)
