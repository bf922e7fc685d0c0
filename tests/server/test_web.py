"""The web chat page in a real headless Chromium against a live server: sign in, stream, stop, chats, resume."""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Dialog, Locator, Page, expect

from tests.support.browser import WAIT, send, sign_in
from tests.support.mcp_server import server as testing_server
from tests.support.runtimes import make_runtime
from tests.support.servers import Live, artifact, running, server_files
from yao_agent.identity import Identity
from yao_agent.store import SqlStore
from yao_agent.testing import FakeProvider, Reply, ToolCall
from yao_agent.tools import ToolManager

pytestmark = [
    pytest.mark.browser,
    # The store does not matter to the page: run once, on SQLite.
    pytest.mark.parametrize("store_raw_url", ["sqlite"], indirect=True),
]

expect.set_options(timeout=WAIT)

HOOK = """\
    function Create(ctx, messages) {
      const last = messages[messages.length - 1];
      if (last.content === "boom") throw new TypeError("cannot handle " + last.content);
      return null;
    }
    function Next(ctx, payload) { return {data: {saw: payload.completion.content}} }
"""


@pytest.fixture
async def rich(tmp_path: Path, store: SqlStore, provider: FakeProvider) -> AsyncIterator[Live]:
    """A live server with an assistant that has a tool (in-process MCP server) and one with a JS hook."""
    files = server_files(provider.base_url)
    files["mcps/testing.yml"] = "command: python\nargs: [-m, tests.support.mcp_server]\n"
    files["assistants/tooled/assistant.yml"] = "name: Tooled\nmcp:\n  servers: [testing]\n"
    files["hooks/h.js"] = textwrap.dedent(HOOK)
    files["assistants/hooked/assistant.yml"] = "name: Hooked\nhook: hooks/h.js\n"
    # Nothing listens on port 1: every call to this connector fails to connect.
    files["connectors/fake/down.yml"] = "type: openai\nmodel: text\nbase_url: http://127.0.0.1:1/v1\napi_key: sk-x\n"
    files["assistants/broken/assistant.yml"] = "name: Broken\nconnector: fake.down\n"
    files["app.yml"] = files["app.yml"].replace("roles:\n", "roles:\n  chain: [fake.down, fake.model]\n")
    files["assistants/chained/assistant.yml"] = "name: Chained\nconnector: use::chain\n"
    rt = make_runtime(tmp_path / "app", store, files)
    rt.tools = ToolManager(rt.app.mcps, root=rt.app.root, in_process={"testing": testing_server})
    async with running(rt) as served:
        yield served


async def test_chat_streams_stops_and_lists_the_chat(live: Live, provider: FakeProvider, page: Page) -> None:
    await sign_in(page, live, live.tokens["alice"])
    await expect(page.locator("#sign-out")).to_be_visible()
    await expect(page.locator("#assistant")).to_be_enabled()
    await page.select_option("#assistant", "chat")

    # A reply streamed in several chunks shows up whole, with the run's end.
    answer = "Hello Alice! <b>Markup</b> stays text; this answer arrives in several small pieces."
    provider.enqueue(Reply(text=answer, chunk_size=5, delay_s=0.01))
    await page.fill("#message", "Who are you?")
    await page.click("#send")
    first = page.locator("#transcript .turn").nth(0)
    await expect(page.locator("#transcript .msg.user .bubble").nth(0)).to_have_text("Who are you?")
    await expect(first.locator(".kind-text .bubble")).to_have_text(answer)
    await expect(page.locator("#transcript b")).to_have_count(0)  # model output is never parsed as HTML
    await expect(first.locator(".run-end")).to_have_attribute("data-status", "completed")
    await expect(page.locator("#status")).to_contain_text("Completed")
    chat = page.locator("#chats .chat-item")
    await expect(chat).to_have_count(1)
    await expect(chat.locator(".chat-title")).to_have_text("Who are you?")

    # A slow reply: stop it while it streams; the run ends cancelled, part of the text shown.
    slow = "tick " * 400
    provider.enqueue(Reply(text=slow, chunk_size=1, delay_s=0.03))
    await page.fill("#message", "Count for a long time")
    await page.click("#send")
    second = page.locator("#transcript .turn").nth(1)
    await expect(second.locator(".kind-text .bubble")).to_contain_text("tick tick")
    await expect(page.locator("#send")).to_be_disabled()
    await page.click("#stop")
    await expect(second.locator(".run-end")).to_have_attribute("data-status", "cancelled")
    await expect(second.locator(".run-message")).to_have_text("Stopped before the answer was finished.")
    await expect(page.locator("#status")).to_contain_text("Stopped")
    shown = await second.locator(".kind-text .bubble").inner_text()
    assert 0 < len(shown) < len(slow.strip())
    await expect(page.locator("#stop")).to_be_disabled()
    await expect(page.locator("#send")).to_be_enabled()

    # Both sends went to one chat, listed with its title and the cancelled run; resume is offered.
    await expect(chat).to_have_count(1)
    await expect(chat.locator(".chat-title")).to_have_text("Who are you?")
    await expect(chat.locator(".badge")).to_have_text("cancelled")
    await expect(page.locator("#resume-info")).to_have_text("This answer was stopped before it was finished.")
    await expect(page.locator("#resume")).to_have_text("Continue")
    await page.screenshot(path=str(artifact("web-chat.png")), full_page=True)

    chat_id = await chat.get_attribute("data-chat-id")
    assert chat_id
    run = await live.rt.store.latest_run(Identity("alice"), chat_id)
    assert run is not None and (run.status, run.reason) == ("cancelled", "cancelled")
    async with live.client("alice") as client:
        listed = (await client.get("/api/chats")).json()["chats"]
    assert [(c["chat_id"], c["title"], c["last_status"]) for c in listed] == [(chat_id, "Who are you?", "cancelled")]

    # A new chat empties the page; clicking the listed chat loads its history back.
    await page.click("#new-chat")
    await expect(page.locator("#transcript .msg")).to_have_count(0)
    await expect(page.locator("#resume")).to_be_hidden()
    await chat.click()
    await expect(page.locator("#transcript .msg.user .bubble")).to_have_text(["Who are you?", "Count for a long time"])
    await expect(page.locator("#transcript .kind-text .bubble").first).to_have_text(answer)

    # Resume continues the cancelled run in the same chat: the cut answer goes on where it stopped, in
    # its own bubble (the stream's new message `continues` it), its "incomplete" mark gone.
    provider.enqueue(Reply(text="Picking up where I stopped.", chunk_size=4))
    await page.click("#resume")
    resumed = page.locator("#transcript .turn").last
    await expect(resumed.locator(".run-end")).to_have_attribute("data-status", "completed")
    cut = page.locator("#transcript .turn").nth(1).locator(".kind-text")
    await expect(cut.locator(".bubble")).to_have_text(re.compile(r"^tick .*Picking up where I stopped\.\s*$"))
    await expect(cut.locator(".badge.status-incomplete")).to_have_count(0)
    await expect(resumed.locator(".kind-text")).to_have_count(0)
    await page.reload()  # stored as one message: shown once, whole
    await expect(page.locator("#transcript .kind-text .bubble").last).to_have_text(
        re.compile(r"^tick .*Picking up where I stopped\.\s*$")
    )
    await expect(page.locator("#transcript .kind-text")).to_have_count(2)
    await expect(page.locator("#resume")).to_be_hidden()
    await expect(chat.locator(".badge")).to_have_text("completed")


async def test_reasoning_tool_cards_hook_errors_and_next_data(rich: Live, provider: FakeProvider, page: Page) -> None:
    await sign_in(page, rich, rich.tokens["alice"])
    await page.select_option("#assistant", "tooled")
    add = ToolCall("testing__add", json.dumps({"a": 2, "b": 3}), id="c1")
    provider.enqueue(Reply(reasoning="I should add them.", tool_calls=(add,)), Reply(text="It is 5."))
    turn = await send(page, "what is 2+3?")
    await expect(turn.locator(".kind-text .bubble")).to_have_text("It is 5.")
    reasoning = turn.locator("details.reasoning")
    await expect(reasoning.locator(".reasoning-text")).to_have_text("I should add them.", use_inner_text=False)
    await expect(reasoning).to_have_js_property("open", False)  # folded away once the answer came
    card = turn.locator(".tool-card")
    await expect(card.locator(".tool-name")).to_have_text("testing__add")
    await expect(card.locator(".tool-args")).to_contain_text('"a": 2')
    await expect(card.locator(".tool-result pre")).to_have_text("5")
    await expect(turn.locator(".run-end")).to_have_attribute("data-status", "completed")
    await page.screenshot(path=str(artifact("web-tools.png")), full_page=True)

    # A hook that throws: the run fails in plain words; its details name the hook file and line.
    await page.click("#new-chat")
    failed = await send(page, "boom", "hooked")
    await expect(failed.locator(".run-end")).to_have_attribute("data-status", "failed")
    await expect(failed.locator(".run-message")).to_have_text("The assistant's script failed.")
    await expect(failed.locator(".run-error")).to_be_hidden()  # folded away
    await failed.locator(".run-details summary").click()
    await expect(failed.locator(".run-error")).to_have_text("hooks/h.js:3: TypeError: cannot handle boom")
    await expect(page.locator("#status")).to_contain_text("Failed")
    await expect(page.locator("#resume-info")).to_have_text(
        "This answer was interrupted (the assistant's script failed)."
    )

    # A Next hook's data is shown under the run.
    await page.click("#new-chat")
    provider.enqueue(Reply(text="hello there"))
    done = await send(page, "hi")
    await expect(done.locator(".run-end")).to_have_attribute("data-status", "completed")
    await expect(done.locator(".run-next pre")).to_contain_text('"saw": "hello there"')
    await expect(page.locator("#chats .chat-item")).to_have_count(3)
    await page.screenshot(path=str(artifact("web-next.png")), full_page=True)


async def test_a_wrong_token_shows_unauthorized(live: Live, page: Page) -> None:
    await sign_in(page, live, "not-a-real-token")
    await expect(page.locator("#auth-message")).to_contain_text("Unauthorized")
    await expect(page.locator("#auth-message")).to_contain_text("invalid or revoked token")
    await expect(page.locator("#token")).to_be_visible()
    await expect(page.locator("#assistant")).to_be_disabled()
    assert await page.evaluate("localStorage.getItem('yao-agent.token')") is None
    await page.screenshot(path=str(artifact("web-unauthorized.png")))


MARKDOWN = """\
## Plan for the trip

Pack **light**, and check `the forecast`:

1. Passport
2. Tickets
- a [map](https://example.org/map)

```python
def pack(items):
    return sorted(items)
```
"""


async def test_replies_are_rendered_as_markdown_as_they_stream(live: Live, provider: FakeProvider, page: Page) -> None:
    await sign_in(page, live, live.tokens["alice"])
    provider.enqueue(Reply(text=MARKDOWN, chunk_size=3, delay_s=0.05))
    await page.fill("#message", "Help me pack")
    await page.click("#send")
    reply = page.locator("#transcript .turn").last.locator(".kind-text .bubble")
    # Rendered while it streams: the heading is there before the code block has arrived.
    await expect(reply.locator("h2")).to_have_text("Plan for the trip")
    assert await page.locator("#stop").is_enabled() and await reply.locator("pre").count() == 0
    await expect(page.locator("#transcript .run-end")).to_have_attribute("data-status", "completed")
    await expect(reply.locator("strong")).to_have_text("light")
    await expect(reply.locator("p code")).to_have_text("the forecast")
    await expect(reply.locator("ol > li")).to_have_text(["Passport", "Tickets"])
    link = reply.locator("a", has_text="map")
    await expect(link).to_have_attribute("href", "https://example.org/map")
    await expect(link).to_have_attribute("target", "_blank")  # a reply's link never replaces the chat
    code = reply.locator("pre code.language-python")
    await expect(code).to_have_text("def pack(items):\n    return sorted(items)\n", use_inner_text=False)
    await expect(code.locator(".hljs-keyword")).to_have_text(["def", "return"])  # highlighted
    colour = await code.locator(".hljs-keyword").first.evaluate("node => getComputedStyle(node).color")
    assert colour != await code.evaluate("node => getComputedStyle(node).color")  # the theme is loaded
    await page.screenshot(path=str(artifact("web-markdown.png")), full_page=True)

    # The stored reply, loaded back, is rendered the same way.
    await page.click("#new-chat")
    await page.locator("#chats .chat-item").first.click()
    await expect(page.locator("#transcript .kind-text .bubble h2")).to_have_text("Plan for the trip")
    await expect(page.locator("#transcript pre code .hljs-keyword")).to_have_count(2)


ATTACK = "<img src=x onerror=\"window.pwned='img'\"><script>window.pwned='script'</script>"
REPLY_ATTACK = f"""\
The page said: {ATTACK}

<iframe src="javascript:window.pwned='iframe'"></iframe>

[claim your prize](javascript:window.pwned='link') ![tracker](http://127.0.0.1:9/pixel.png)
<a href="javascript:window.pwned='anchor'">click</a>
"""


async def test_markup_from_a_model_or_a_tool_never_runs(rich: Live, provider: FakeProvider, page: Page) -> None:
    fetched: list[str] = []
    page.on("request", lambda request: fetched.append(request.url))
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: dialogs.append(dialog.message))
    await sign_in(page, rich, rich.tokens["alice"])
    await page.select_option("#assistant", "tooled")
    call = ToolCall("testing__echo", json.dumps({"text": ATTACK}), id="c1")
    provider.enqueue(Reply(tool_calls=(call,)), Reply(text=REPLY_ATTACK, chunk_size=7, delay_s=0.01))
    turn = await send(page, "what does the page say?")
    await expect(turn.locator(".run-end")).to_have_attribute("data-status", "completed")
    reply = turn.locator(".kind-text .bubble")
    await expect(reply).to_contain_text(f"The page said: {ATTACK}")  # shown as the text it is
    await expect(turn.locator(".tool-result pre")).to_have_text(ATTACK)
    await expect(page.locator("#transcript img, #transcript script, #transcript iframe")).to_have_count(0)
    await expect(reply.locator("a", has_text="claim your prize")).not_to_have_attribute(
        "href", "javascript:window.pwned='link'"
    )
    assert await reply.locator("a[href^='javascript']").count() == 0
    await reply.locator("a", has_text="claim your prize").click()
    await expect(reply.locator("a", has_text="image: tracker")).to_have_attribute(
        "href", "http://127.0.0.1:9/pixel.png"
    )
    await page.screenshot(path=str(artifact("web-xss.png")), full_page=True)
    assert await page.evaluate("typeof window.pwned") == "undefined"
    assert dialogs == []
    assert not [url for url in fetched if url.endswith("/x") or "127.0.0.1:9" in url]  # no image was loaded


async def test_a_failed_run_says_why_in_plain_words(rich: Live, page: Page) -> None:
    await sign_in(page, rich, rich.tokens["alice"])
    turn = await send(page, "are you there?", "broken")
    await expect(turn.locator(".run-end")).to_have_attribute("data-status", "failed")
    await expect(turn.locator(".run-message")).to_have_text("The model could not be reached or refused the request.")
    await expect(page.locator("#status")).to_contain_text("Failed after")
    await expect(page.locator("#resume-info")).to_have_text(
        "This answer was interrupted (the model could not be reached)."
    )
    await expect(page.locator("#resume")).to_have_text("Try again")
    chat_id = await page.locator("#chats .chat-item").first.get_attribute("data-chat-id")
    assert chat_id
    run = await rich.rt.store.latest_run(Identity("alice"), chat_id)
    assert run is not None and "Cannot connect to host" in run.error["message"]
    await expect(turn.locator(".run-details summary")).to_have_text(f"details: run {run.id}")  # for an operator
    shown = await page.locator("body").inner_text()
    for internal in ("Cannot connect", "127.0.0.1:1", "model_error", "resume point", "interrupted run"):
        assert internal not in shown, internal
    await page.screenshot(path=str(artifact("web-failed.png")), full_page=True)

    # Unfolded, the details show the stored error, once.
    await turn.locator(".run-details summary").click()
    await expect(turn.locator(".run-error")).to_have_text(run.error["message"])
    assert (await page.locator("body").inner_text()).count("Cannot connect to host") == 1

    # Opened again later, the chat offers the same plain retry.
    await page.click("#new-chat")
    await expect(page.locator("#resume-bar")).to_be_hidden()
    await page.locator("#chats .chat-item").first.click()
    await expect(page.locator("#resume-info")).to_have_text(
        "This answer was interrupted (the model could not be reached)."
    )


async def test_a_fallback_is_a_quiet_note_under_the_reply(rich: Live, provider: FakeProvider, page: Page) -> None:
    await sign_in(page, rich, rich.tokens["alice"])
    provider.enqueue(Reply(text="Here I am."))
    turn = await send(page, "hello?", "chained")
    await expect(turn.locator(".kind-text .bubble")).to_have_text("Here I am.")
    await expect(turn.locator(".run-end .run-fallback")).to_have_text(
        "answered by fake.model — fake.down was unavailable"
    )
    await expect(turn.locator(".notice")).to_have_count(0)  # no banner


async def accept(dialog: Dialog) -> None:
    await dialog.accept()


async def test_chats_are_searched_renamed_and_deleted(live: Live, provider: FakeProvider, page: Page) -> None:
    provider.enqueue(Reply(text="Lisbon in May is lovely."), Reply(text="Use a sourdough starter."), Reply(text="Hi."))
    async with live.client("alice") as alice, live.client("bob") as bob:
        for text in ("Plan a trip to Lisbon", "How do I bake bread?"):
            await alice.post(
                "/api/assistants/chat/runs?stream=false", json={"messages": [{"role": "user", "content": text}]}
            )
        await bob.post(
            "/api/assistants/chat/runs?stream=false", json={"messages": [{"role": "user", "content": "Lisbon office"}]}
        )
    await sign_in(page, live, live.tokens["alice"])
    titles = page.locator("#chats .chat-title")
    await expect(titles).to_have_text(["How do I bake bread?", "Plan a trip to Lisbon"])

    # Search: by title, by what was said, in any case; bob's chats never show.
    await page.fill("#chat-search", "LISBON")
    await expect(titles).to_have_text(["Plan a trip to Lisbon"])
    await page.fill("#chat-search", "sourdough")
    await expect(titles).to_have_text(["How do I bake bread?"])
    await page.fill("#chat-search", "office")
    await expect(titles).to_have_count(0)
    await expect(page.locator("#chats-empty")).to_have_text("No chats match “office”.")
    await page.fill("#chat-search", "")
    await expect(titles).to_have_count(2)

    # Rename: inline, Enter saves; Escape leaves the title as it was.
    await page.locator("#chats .chat-item", has_text="bread").click()
    await page.click("#rename-chat")
    await expect(page.locator("#rename-input")).to_have_value("How do I bake bread?")
    await page.fill("#rename-input", "Bread notes")
    await page.screenshot(path=str(artifact("web-rename.png")))
    await page.press("#rename-input", "Enter")
    await expect(page.locator("#chat-title")).to_have_text("Bread notes")
    await expect(titles).to_have_text(["Bread notes", "Plan a trip to Lisbon"])
    await page.click("#rename-chat")
    await page.fill("#rename-input", "Something else")
    await page.press("#rename-input", "Escape")
    await expect(page.locator("#chat-title")).to_have_text("Bread notes")
    async with live.client("alice") as alice:
        listed = (await alice.get("/api/chats")).json()["chats"]
    assert [c["title"] for c in listed] == ["Bread notes", "Plan a trip to Lisbon"]
    await page.fill("#chat-search", "bread")
    await expect(titles).to_have_text(["Bread notes"])
    await page.screenshot(path=str(artifact("web-search.png")))
    await page.fill("#chat-search", "")

    # Delete: asks first; dismissed, nothing happens; confirmed, the chat is gone for good.
    await page.click("#delete-chat")  # the dialog is dismissed (no handler)
    await expect(titles).to_have_count(2)
    page.once("dialog", accept)
    await page.click("#delete-chat")
    await expect(titles).to_have_text(["Plan a trip to Lisbon"])
    await expect(page.locator("#chat-title")).to_have_text("New chat")
    await expect(page.locator("#chat-actions")).to_be_hidden()
    await expect(page.locator("#status")).to_have_text("Deleted “Bread notes”.")
    async with live.client("alice") as alice:
        assert [c["title"] for c in (await alice.get("/api/chats")).json()["chats"]] == ["Plan a trip to Lisbon"]


async def test_a_compaction_is_a_quiet_notice_and_its_summary_a_marker(
    tmp_path: Path, store: SqlStore, provider: FakeProvider, page: Page
) -> None:
    """Earlier turns summarised to fit a small window: a notice in the turn that did it; the stored summary
    a folded marker among the messages it covers, which are all still shown."""
    files = server_files(provider.base_url)
    files["assistants/brief/assistant.yml"] = (
        "name: Brief\ncontext: {max_input_tokens: 400, reserve_output_tokens: 100, keep_recent_turns: 1}\n"
    )
    filler = " word" * 80  # about 80 tokens: the third turn takes the request past compact_at of 300
    provider.enqueue(Reply(text="one"), Reply(text="two"), Reply(text="They asked twice."), Reply(text="three"))
    async with running(make_runtime(tmp_path / "app", store, files)) as live:
        await sign_in(page, live, live.tokens["alice"])
        turns: list[Locator] = []
        for number, text in enumerate(("first", "second", "third"), start=1):
            turns.append(await send(page, text + filler, "brief" if number == 1 else None))
            await expect(turns[-1].locator(".run-end")).to_have_count(1)
        turn = turns[-1]
        await expect(turn.locator(".notice.compaction")).to_have_text(
            re.compile(
                r"^4 earlier messages summarised to fit the model's window \(\d+ → \d+ tokens, by fake\.model\)$"
            )
        )
        await expect(turn.locator(".kind-text .bubble")).to_have_text("three")

        await page.reload()
        await page.locator("#chats .chat-item").first.click()
        marker = page.locator("#transcript details.notice.compaction")
        await expect(marker.locator("summary")).to_have_text("Summary of 4 earlier messages")
        await expect(marker.locator(".summary-text")).to_have_text("They asked twice.")
        await expect(page.locator("#transcript .msg.user")).to_have_count(3)  # what it covers is still shown
