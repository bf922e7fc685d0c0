"""The chat page as a person uses it, in a real headless Chromium against a live server: copying, several chats
at once, a reload while an answer streams, a structured answer, images and documents attached (picked,
dropped, pasted), and citations that lead to their sources."""

from __future__ import annotations

import asyncio
import base64
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Page, expect

from tests.support.browser import WAIT, send, sign_in
from tests.support.pdfs import facilities_guide
from tests.support.runtimes import make_runtime
from tests.support.servers import Live, running, server_files
from tests.support.waits import wait_until
from yao_agent.identity import OPERATOR
from yao_agent.store import SqlStore
from yao_agent.testing import FakeProvider, Reply

pytestmark = [pytest.mark.browser, pytest.mark.parametrize("store_raw_url", ["sqlite"], indirect=True)]
expect.set_options(timeout=WAIT)

# A 1×1 PNG: what a person attaches, small enough to read in a failure message.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
SHAPED = "name: Shaped\noutput:\n  schema: {type: object, properties: {city: {type: string}}, required: [city]}\n"


@pytest.fixture
async def rich(tmp_path: Path, store: SqlStore, provider: FakeProvider) -> AsyncIterator[Live]:
    """A live server with a vision connector's assistant, a structured-output one and team knowledge."""
    files = server_files(provider.base_url)
    files["connectors/fake/eyes.yml"] = (
        f"type: openai\nmodel: eyes\nbase_url: {provider.base_url}\napi_key: sk-x\ncapabilities: {{vision: true}}\n"
    )
    files["assistants/seer/assistant.yml"] = "name: Seer\nconnector: fake.eyes\n"
    files["assistants/shaped/assistant.yml"] = SHAPED
    files["assistants/kb/assistant.yml"] = "name: KB\nsearch: {knowledge: [team]}\n"
    rt = make_runtime(tmp_path / "app", store, files)
    async with running(rt) as served:
        await rt.knowledge.create(OPERATOR, "policies", None, team="acme")
        yield served


def slow_text(words: int) -> str:
    return " ".join(f"w{i}" for i in range(words))


async def clipboard(page: Page) -> str:
    return await page.evaluate("navigator.clipboard.readText()")


async def test_a_reply_its_code_and_a_message_are_copied(live: Live, provider: FakeProvider, page: Page) -> None:
    await page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live.url)
    await sign_in(page, live, live.tokens["alice"])
    answer = "Run this:\n\n```python\nprint('hi')\n```\n\nThen check the output."
    provider.enqueue(Reply(text=answer, chunk_size=7))
    turn = await send(page, "Some code, please", "chat")
    await expect(turn.locator(".run-end")).to_have_attribute("data-status", "completed")

    code = turn.locator(".code-block .code-copy")
    await expect(code).to_have_count(1)
    await code.click()
    await expect(code).to_have_text("Copied")
    assert (await clipboard(page)).strip() == "print('hi')"

    await turn.locator(".kind-text > .msg-actions .copy").click()
    assert await clipboard(page) == answer  # the reply as written (markdown), not as laid out
    await page.locator("#transcript .msg.user .msg-actions .copy").click()
    assert await clipboard(page) == "Some code, please"


async def test_a_chat_keeps_streaming_while_the_person_uses_another(
    live: Live, provider: FakeProvider, page: Page
) -> None:
    await sign_in(page, live, live.tokens["alice"])
    slow = slow_text(200)
    provider.enqueue(Reply(text=slow, chunk_size=4, delay_s=0.04))
    first = await send(page, "Take your time", "chat")
    await expect(first.locator(".kind-text .bubble")).to_contain_text("w1 w2")
    answering = page.locator('#chats .chat-item[data-status="running"]')
    await expect(answering.locator(".badge")).to_have_text("answering…")

    # Another chat, while the first streams: it can be written in, and it answers.
    await page.click("#new-chat")
    await expect(page.locator("#transcript .msg")).to_have_count(0)
    await expect(page.locator("#send")).to_be_enabled()
    provider.enqueue(Reply(text="A quick answer."))
    second = await send(page, "Quick question")
    await expect(second.locator(".kind-text .bubble")).to_have_text("A quick answer.")
    await expect(page.locator("#chats .chat-item")).to_have_count(2)
    await expect(answering).to_have_count(1)  # the first is still answering, and says so in the list

    # Back to it: the answer went on meanwhile and goes on to its end here.
    await answering.click()
    await expect(page.locator("#status")).to_contain_text("Streaming")
    await expect(page.locator("#send")).to_be_disabled()
    await expect(page.locator("#transcript .kind-text .bubble")).to_have_text(slow)
    await expect(page.locator("#transcript .run-end")).to_have_attribute("data-status", "completed")
    await expect(page.locator('#chats .chat-item[data-status="completed"]')).to_have_count(2)
    await expect(page.locator("#send")).to_be_enabled()
    # The other chat kept its own conversation.
    await page.locator("#chats .chat-item", has_text="Quick question").click()
    await expect(page.locator("#transcript .msg.user .bubble")).to_have_text(["Quick question"])


async def test_a_reload_resumes_the_answer_it_cut_off(live: Live, provider: FakeProvider, page: Page) -> None:
    await sign_in(page, live, live.tokens["alice"])
    provider.enqueue(Reply(text=slow_text(300), chunk_size=4, delay_s=0.04), Reply(text="and that is all."))
    turn = await send(page, "Keep going", "chat")
    await expect(turn.locator(".kind-text .bubble")).to_contain_text("w1 w2")

    # Leaving the stream stops the run on the server; the page that comes back opens the chat and resumes it.
    await page.reload()
    await expect(page.locator("#transcript .msg.user .bubble")).to_have_text(["Keep going"])
    resumed = page.locator("#transcript .turn", has_text="Assistant (resumed)")
    await expect(resumed.locator(".run-end")).to_have_attribute("data-status", "completed")
    # the reply goes on from the words shown, in the same bubble: one reply, not a second answer
    await expect(page.locator("#transcript .kind-text .bubble")).to_have_text(
        re.compile(r"^w0 w1 .*and that is all\.\s*$")
    )
    assert provider.requests[-1].messages[-2]["role"] == "assistant"  # the cut text, for the model to go on from
    await expect(page.locator("#status")).to_contain_text("Completed")
    await expect(page.locator("#send")).to_be_enabled()
    assert len(provider.requests) == 2


async def test_an_answer_started_elsewhere_is_followed_and_can_be_stopped(
    live: Live, provider: FakeProvider, page: Page
) -> None:
    await sign_in(page, live, live.tokens["alice"])
    provider.enqueue(Reply(text="First."))
    await expect((await send(page, "Hello", "chat")).locator(".run-end")).to_have_attribute("data-status", "completed")
    chat_id = await page.locator("#chats .chat-item").first.get_attribute("data-chat-id")

    provider.enqueue(Reply(text=slow_text(300), chunk_size=2, delay_s=0.04))
    async with live.client("alice") as client:
        body = {"chat_id": chat_id, "messages": [{"role": "user", "content": "From the API"}]}
        elsewhere = asyncio.create_task(client.post("/api/assistants/chat/runs?stream=false", json=body, timeout=60))

        async def running() -> bool:
            return (await client.get("/api/chats")).json()["chats"][0]["last_status"] == "running"

        await wait_until(running)
        await page.reload()  # the chat is opened again, its run (not this page's) followed as it is stored
        await expect(page.locator("#status")).to_contain_text("Still answering")
        await expect(page.locator("#send")).to_be_disabled()
        await expect(page.locator("#stop")).to_be_enabled()
        await page.click("#stop")
        await expect(page.locator("#status")).to_have_text("Last run: cancelled.")
        assert (await elsewhere).json()["status"] == "cancelled"
    await expect(page.locator("#transcript .msg.user .bubble")).to_have_text(["Hello", "From the API"])
    await expect(page.locator("#resume")).to_be_visible()


async def test_a_structured_answer_is_its_value_with_the_attempts_folded(
    rich: Live, provider: FakeProvider, page: Page
) -> None:
    await sign_in(page, rich, rich.tokens["alice"])
    provider.enqueue(Reply(text="It is Paris."), Reply(text='{"city": "Paris"}'))
    turn = await send(page, "Which city?", "shaped")
    await expect(turn.locator(".run-end")).to_have_attribute("data-status", "completed")
    await expect(turn.locator(".structured-output .output-value")).to_have_text('{\n  "city": "Paris"\n}')
    attempts = turn.locator(".output-attempts")
    await expect(attempts.locator("summary")).to_have_text(
        "details: the model's 2 replies (1 did not match the schema and were asked again)"
    )
    await expect(attempts.locator(".kind-text").first).to_be_hidden()  # folded away until opened
    await attempts.locator("summary").click()
    await expect(attempts.locator(".kind-text .bubble")).to_have_text(["It is Paris.", '{"city": "Paris"}'])


async def test_an_image_is_sent_to_a_model_that_reads_images(
    rich: Live, provider: FakeProvider, page: Page, tmp_path: Path
) -> None:
    picture = tmp_path / "dot.png"
    picture.write_bytes(PNG)
    await sign_in(page, rich, rich.tokens["alice"])
    await page.select_option("#assistant", "seer")
    await page.set_input_files(".attach-input", str(picture))
    chip = page.locator(".attachments .attachment")
    await expect(chip.locator(".attachment-name")).to_have_text("dot.png")
    await chip.get_by_role("button", name="Remove dot.png").click()
    await expect(chip).to_have_count(0)
    await page.set_input_files(".attach-input", str(picture))

    provider.enqueue(Reply(text="A single dot."))
    turn = await send(page, "What is this?")
    await expect(turn.locator(".kind-text .bubble")).to_have_text("A single dot.")
    await expect(chip).to_have_count(0)  # it went with that message
    image = page.locator("#transcript .msg.user img.attached-image")
    await expect(image).to_have_count(1)
    parts = provider.requests[-1].messages[-1]["content"]
    assert parts[0] == {"type": "text", "text": "What is this?"}
    assert parts[1]["image_url"]["url"] == "data:image/png;base64," + base64.b64encode(PNG).decode()

    await page.reload()  # stored, the picture is shown with the message again
    await expect(page.locator("#transcript .msg.user img.attached-image")).to_have_count(1)


async def test_images_are_dropped_and_pasted_and_a_model_without_sight_refuses_them(
    rich: Live, provider: FakeProvider, page: Page
) -> None:
    await sign_in(page, rich, rich.tokens["alice"])
    await page.select_option("#assistant", "chat")
    encoded = base64.b64encode(PNG).decode()
    await page.evaluate(
        """([encoded]) => {
          const bytes = Uint8Array.from(atob(encoded), (c) => c.charCodeAt(0));
          const files = (name) => {
            const t = new DataTransfer();
            t.items.add(new File([bytes], name, {type: "image/png"}));
            return t;
          };
          const main = document.querySelector("main");
          const how = (key, name) => ({[key]: files(name), bubbles: true, cancelable: true});
          const drag = (type) => new DragEvent(type, how("dataTransfer", "dropped.png"));
          main.dispatchEvent(drag("dragover"));
          main.dispatchEvent(drag("drop"));
          const paste = new ClipboardEvent("paste", how("clipboardData", "pasted.png"));
          document.getElementById("message").dispatchEvent(paste);
        }""",
        [encoded],
    )
    await expect(page.locator(".attachments .attachment-name")).to_have_text(["dropped.png", "pasted.png"])

    turn = await send(page, "Describe both")
    await expect(turn.locator(".run-end")).to_have_attribute("data-status", "failed")
    await expect(turn.locator(".run-message")).to_contain_text("This assistant's model cannot read images")
    assert not provider.requests  # refused before any model was asked
    await expect(page.locator("#transcript .msg.user img.attached-image")).to_have_count(2)  # kept in the chat
    await expect(turn.locator(".regenerate")).to_have_count(0)  # nothing a model could answer again

    # The chat goes on: the next message reaches the model without the images it could not read.
    provider.enqueue(Reply(text="Only words, then."))
    turn = await send(page, "Never mind, in words")
    await expect(turn.locator(".kind-text .bubble")).to_have_text("Only words, then.")
    assert "image_url" not in str(provider.requests[-1].messages)


async def test_a_document_goes_to_knowledge_and_a_citation_opens_its_source(
    rich: Live, provider: FakeProvider, page: Page, tmp_path: Path
) -> None:
    document = facilities_guide(tmp_path)
    await sign_in(page, rich, rich.tokens["bob_admin"])
    await expect(page.locator("#knowledge")).to_be_visible()
    await page.set_input_files(".attach-input", str(document))
    await expect(page.locator(".attach-status")).to_have_text(
        "Added Facilities guide (1 passage). The assistant finds it when it searches that knowledge."
    )
    await expect(page.locator(".attachments .attachment")).to_have_count(0)  # nothing goes with the message

    provider.enqueue(Reply(text="Park on level 2 [1]."))
    turn = await send(page, "Where do I park?", "kb")
    cite = turn.locator(".kind-text .bubble button.cite")
    await expect(cite).to_have_text("[1]")
    await expect(cite).to_have_attribute("aria-label", "Source 1: Facilities guide › Page 1")
    source = turn.locator(".sources .source").first
    await source.locator("details").evaluate("d => { d.open = false; }")
    await cite.click()
    await expect(source.locator(".source-text")).to_be_visible()
    await expect(source.locator("summary")).to_be_focused()


async def test_regenerate_keeps_the_old_answer_as_an_earlier_version(
    live: Live, provider: FakeProvider, page: Page
) -> None:
    await sign_in(page, live, live.tokens["alice"])
    provider.enqueue(Reply(text="Pack a map."))
    first = await send(page, "What should I pack?", "chat")
    await expect(first.locator(".run-end")).to_have_attribute("data-status", "completed")

    provider.enqueue(Reply(text="Pack a compass."))
    await page.get_by_role("button", name="Regenerate the answer (the one shown is kept as an earlier version)").click()
    versions = page.locator("#transcript .versions")
    await expect(versions.locator(".version-label")).to_have_text("Version 2 of 2")
    await expect(versions.locator(".version:not(.earlier) .kind-text .bubble")).to_have_text("Pack a compass.")
    await expect(versions.locator(".version.earlier")).to_be_hidden()
    # the model was asked the same question, without the answer it replaces
    assert [m["content"] for m in provider.requests[-1].messages if m["role"] != "system"] == ["What should I pack?"]

    await versions.get_by_role("button", name="Show the previous version").click()
    await expect(versions.locator(".version-label")).to_have_text("Version 1 of 2 (earlier)")
    await expect(versions.locator(".version.earlier .kind-text .bubble")).to_have_text("Pack a map.")
    await versions.get_by_role("button", name="Show the next version").click()

    # Stored so: opened again, the chat shows both versions, the new one current; a third chains on.
    await page.reload()
    await expect(page.locator("#transcript .versions .version-label")).to_have_text("Version 2 of 2")
    provider.enqueue(Reply(text="Pack a torch."))
    await page.locator("#transcript .regenerate").click()
    await expect(page.locator("#transcript .versions .version-label")).to_have_text("Version 3 of 3")
    await expect(page.locator("#transcript .version:not(.earlier) .kind-text .bubble")).to_have_text("Pack a torch.")
    await expect(page.locator("#transcript .version:not(.earlier) .run-end")).to_have_attribute(
        "data-status", "completed"
    )


async def test_a_message_is_edited_and_the_chat_goes_on_from_it(live: Live, provider: FakeProvider, page: Page) -> None:
    await sign_in(page, live, live.tokens["alice"])
    provider.enqueue(Reply(text="Paris is lovely."))
    await expect((await send(page, "Tell me about Paris", "chat")).locator(".run-end")).to_have_attribute(
        "data-status", "completed"
    )
    provider.enqueue(Reply(text="Rome is older."))
    await expect((await send(page, "And Rome?")).locator(".run-end")).to_have_attribute("data-status", "completed")

    # Edit the first message: it and everything after it become the earlier version.
    await page.locator("#transcript .msg.user").first.get_by_role("button", name="Edit and resend this message").click()
    field = page.get_by_role("textbox", name="Edit your message")
    await expect(field).to_have_value("Tell me about Paris")
    await field.fill("Tell me about Lyon")
    provider.enqueue(Reply(text="Lyon is known for its food."))
    await page.get_by_role("button", name="Send edited message").click()
    current = page.locator("#transcript .version:not(.earlier)")
    await expect(current.locator(".msg.user .bubble")).to_have_text(["Tell me about Lyon"])
    await expect(current.locator(".kind-text .bubble")).to_have_text(["Lyon is known for its food."])
    await expect(page.locator("#transcript .version-label")).to_have_text("Version 2 of 2")
    assert [m["content"] for m in provider.requests[-1].messages if m["role"] != "system"] == ["Tell me about Lyon"]

    # The earlier version holds the whole replaced exchange; the chat goes on from the edit.
    await page.get_by_role("button", name="Show the previous version").click()
    earlier = page.locator("#transcript .version.earlier")
    await expect(earlier.locator(".msg.user .bubble")).to_have_text(["Tell me about Paris", "And Rome?"])
    provider.enqueue(Reply(text="Yes, and its silk."))
    await expect((await send(page, "Anything else?")).locator(".kind-text .bubble")).to_have_text("Yes, and its silk.")
    sent = [m["content"] for m in provider.requests[-1].messages if m["role"] != "system"]
    assert sent == ["Tell me about Lyon", "Lyon is known for its food.", "Anything else?"]
    await page.reload()
    await expect(page.locator("#transcript .version:not(.earlier) .msg.user .bubble")).to_have_text(
        ["Tell me about Lyon"]
    )
    await expect(page.locator("#transcript .msg.user .bubble").last).to_have_text("Anything else?")
