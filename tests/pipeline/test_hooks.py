"""JS hooks in the pipeline: Create and Next shapes, errors with file and line, delegation, ctx.call."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from tests.support.hooks import Make, hooked
from tests.support.runtimes import ALICE, close, end_of, make_runtime, runs_of, stored, turn
from tests.support.tools import in_process
from yao_agent.dsl import load_app
from yao_agent.events import MessageDelta, MessageEnd, MessageStart, StreamEnd, StreamStart
from yao_agent.pipeline import RunRequest, Runtime
from yao_agent.store import SqlStore
from yao_agent.store.schema import steps
from yao_agent.testing import Reply, ScriptedModel


async def test_create_rewrites_the_request(make: Make, fake: ScriptedModel) -> None:
    rt = make("""
        function Create(ctx, messages, options) {
          return {messages: [{role: "user", content: "rewritten: " + messages[messages.length - 1].content}],
                  prompt_preset: "terse", temperature: 0.1, max_tokens: 50, metadata: {seen: true}, locale: "fr"};
        }
    """)
    fake.enqueue(Reply(text="ok"))
    end = end_of(await turn(rt, "original", assistant="hooked"))
    assert end.status == "completed"
    [request] = fake.requests
    assert request.messages == [
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": "rewritten: original"},
    ]
    assert (request.body["temperature"], request.body["max_tokens"]) == (0.1, 50)
    assert await stored(rt) == [("user", "original", "completed"), ("assistant", "ok", "completed")]  # input as given
    await close(rt)


async def test_create_changes_the_connector(make: Make, fake: ScriptedModel) -> None:
    rt = make("function Create() { return {connector: 'demo.echo'} }")
    end = end_of(await turn(rt, "via echo", assistant="hooked"))
    assert end.status == "completed"
    assert await stored(rt) == [("user", "via echo", "completed"), ("assistant", "echo: via echo", "completed")]
    assert fake.requests == []
    await close(rt)


async def test_null_and_missing_functions_change_nothing(make: Make, fake: ScriptedModel) -> None:
    rt = make("function Create() { return null }\n// no Next at all\n")
    fake.enqueue(Reply(text="plain"))
    end = end_of(await turn(rt, "hi", assistant="hooked"))
    assert (end.status, end.next) == ("completed", None)
    assert fake.requests[0].messages[-1] == {"role": "user", "content": "hi"}
    await close(rt)


async def test_a_throw_names_the_file_and_line(make: Make, fake: ScriptedModel) -> None:
    rt = make("""\
        function Create(ctx, messages) {
          const last = messages[messages.length - 1];
          throw new TypeError("cannot handle " + last.content);
        }
    """)
    events = await turn(rt, "this", assistant="hooked")
    end = end_of(events)
    assert (end.status, end.reason) == ("failed", "hook_error")
    assert end.error == {"file": "hooks/h.js", "line": 3, "message": "TypeError: cannot handle this"}
    assert await stored(rt) == [("user", "this", "completed")]
    point = await rt.store.resume_point(ALICE, "c1")
    assert point is not None and [(s.type, s.status) for s in point.steps] == [("hook_create", "failed")]
    await close(rt)


async def test_on_error_ignore_logs_and_goes_on(
    make: Make, fake: ScriptedModel, caplog: pytest.LogCaptureFixture
) -> None:
    rt = make(
        "function Create() { throw new Error('flaky') }",
        "name: Hooked\nhook: hooks/h.js\nhook_policy: {on_error: ignore}\n",
    )
    fake.enqueue(Reply(text="still answered"))
    end = end_of(await turn(rt, "hi", assistant="hooked"))
    assert end.status == "completed"
    assert "hooks/h.js:1 Create failed and is ignored (on_error: ignore): Error: flaky" in caplog.text
    await close(rt)


async def test_an_infinite_loop_stops_at_timeout_and_the_next_run_works(make: Make, fake: ScriptedModel) -> None:
    rt = make("""
        function Create(ctx, messages) {
          if (messages[messages.length - 1].content === "loop") { while (true) {} }
          return null;
        }
    """)
    end = end_of(await turn(rt, "loop", assistant="hooked"))
    assert (end.reason, end.error["message"]) == ("hook_error", "hook timed out after 300 ms")
    fake.enqueue(Reply(text="fine again"))
    assert end_of(await turn(rt, "normal", assistant="hooked", chat_id="c2")).status == "completed"
    await close(rt)


async def test_a_memory_bomb_fails_the_run_cleanly(make: Make, fake: ScriptedModel) -> None:
    rt = make("function Create() { const a = []; while (true) a.push(new Array(100000).fill(1.5)); }")
    end = end_of(await turn(rt, "boom", assistant="hooked"))
    assert (end.reason, end.error["message"]) == ("hook_error", "hook exceeded its memory limit of 16 MB")
    await close(rt)


async def test_hooks_cannot_reach_the_host(make: Make, fake: ScriptedModel) -> None:
    rt = make("""
        function Create() {
          const tried = {};
          for (const [name, attempt] of Object.entries({
            require: () => require("fs"), process: () => process.env, fetch: () => fetch("http://example.com"),
            xhr: () => new XMLHttpRequest(), constructor: () => globalThis.constructor.constructor("return process")(),
          })) { try { attempt(); tried[name] = "reached"; } catch (e) { tried[name] = e.name; } }
          return {metadata: {tried}};
        }
        function Next(ctx) { return {data: ctx.metadata.tried} }
    """)
    fake.enqueue(Reply(text="ok"))
    end = end_of(await turn(rt, "hi", assistant="hooked"))
    assert end.next == {"require": "ReferenceError", "process": "ReferenceError", "fetch": "ReferenceError",
                        "xhr": "ReferenceError", "constructor": "ReferenceError"}  # fmt: skip
    await close(rt)


async def test_next_data_continue_and_the_payload(make: Make, fake: ScriptedModel) -> None:
    rt = make("""
        async function Next(ctx, payload, options) {
          const seen = (await ctx.memory.get("turns")) || 0;
          await ctx.memory.set("turns", seen + 1);
          if (seen === 0) return {continue: {messages: [{role: "user", content: "Now shorter."}]}};
          return {data: {reply: payload.completion.content, turns: seen + 1, history: payload.messages.length}};
        }
    """)
    fake.enqueue(Reply(text="A long first answer."), Reply(text="Short."))
    end = end_of(await turn(rt, "question", assistant="hooked"))
    assert end.status == "completed"
    assert end.next == {"reply": "Short.", "turns": 2, "history": 3}
    assert fake.requests[1].messages == [
        {"role": "user", "content": "question"},
        {"role": "assistant", "content": "A long first answer."},
        {"role": "user", "content": "Now shorter."},
    ]
    assert await rt.store.memory_get(ALICE, "c1", "turns") == 2
    await close(rt)


async def test_ctx_send_and_log(make: Make, fake: ScriptedModel, caplog: pytest.LogCaptureFixture) -> None:
    rt = make("""
        async function Create(ctx) {
          await ctx.log("info", "hello from " + ctx.assistant_id + " for " + ctx.user_id);
          await ctx.send("Looking that up...");
          return null;
        }
    """)
    fake.enqueue(Reply(text="Found it."))
    with caplog.at_level("INFO", logger="yao_agent.hook"):
        events = await turn(rt, "hi", assistant="hooked")
    ends = [e.content for e in events if isinstance(e, MessageEnd)]
    assert ends == ["Looking that up...", "Found it."]
    assert "hooks/h.js (hooked): hello from hooked for alice" in caplog.text
    assert [row[1] for row in await stored(rt)] == ["hi", "Looking that up...", "Found it."]
    fake.enqueue(Reply(text="next"))
    await turn(rt, "again", assistant="hooked")
    assert {"role": "assistant", "content": "Looking that up..."} not in fake.requests[1].messages
    await close(rt)


DELEGATE_FILES = {
    "hooks/front.js": "function Create() { return {delegate: {assistant_id: 'expert'}} }\n",
    "assistants/front/assistant.yml": "name: Front\nhook: hooks/front.js\n",
    "assistants/expert/assistant.yml": "name: Expert\nconnector: demo.echo\n",
}


async def test_delegation_hands_the_turn_to_the_child(make: Make, fake: ScriptedModel) -> None:
    rt = make("", more=DELEGATE_FILES)
    events = await turn(rt, "need an expert", assistant="front")
    assert sum(isinstance(e, StreamStart) for e in events) == 1 and sum(isinstance(e, StreamEnd) for e in events) == 1
    parts = [e for e in events if isinstance(e, MessageStart | MessageDelta | MessageEnd)]
    assert {type(e) for e in parts} == {MessageStart, MessageDelta, MessageEnd}
    assert all(e.thread_id is not None for e in parts)  # every part of the child's reply says whose it is
    end = end_of(events)
    assert end.status == "completed"
    rows = await rt.store.history(ALICE, "c1")
    assert [(m.role, m.content, m.thread_id is not None) for m in rows] == [
        ("user", "need an expert", False),
        ("assistant", "echo: need an expert", True),
    ]
    assert fake.requests == []  # the front assistant's own model was never called
    await close(rt)


async def test_a_delegation_cycle_stops_at_the_depth_limit(make: Make, fake: ScriptedModel) -> None:
    rt = make("", more={
        "hooks/a.js": "function Create() { return {delegate: {assistant_id: 'b'}} }\n",
        "hooks/b.js": "function Create() { return {delegate: {assistant_id: 'a'}} }\n",
        "assistants/a/assistant.yml": "name: A\nhook: hooks/a.js\n",
        "assistants/b/assistant.yml": "name: B\nhook: hooks/b.js\n",
        "app.yml": "roles:\n  default: fake.model\nlimits: {max_delegate_depth: 3}\n",
    })  # fmt: skip
    end = end_of(await turn(rt, "loop", assistant="a"))
    assert (end.status, end.reason) == ("failed", "delegate_error")
    assert end.error["message"] == "delegation deeper than 3 (limits.max_delegate_depth): a → b → a → b → a"
    await close(rt)


async def test_ctx_call_from_an_async_hook(make: Make, fake: ScriptedModel) -> None:
    rt = make(
        """
        async function Create(ctx, messages) {
          const question = "ask: " + messages[messages.length - 1].content;
          const answer = await ctx.call("expert", [{role: "user", content: question}]);
          return {metadata: {expert: answer.content, thread: answer.thread_id}};
        }
        function Next(ctx) { return {data: ctx.metadata} }
    """,
        more={"assistants/expert/assistant.yml": "name: Expert\nconnector: demo.echo\n"},
    )
    fake.enqueue(Reply(text="main answer"))
    end = end_of(await turn(rt, "topic", assistant="hooked"))
    assert end.status == "completed"
    assert end.next["expert"] == "echo: ask: topic" and end.next["thread"].startswith("thread_")
    assert [row[1] for row in await stored(rt)] == ["topic", "echo: ask: topic", "main answer"]
    fake.enqueue(Reply(text="second"))
    await turn(rt, "follow-up", assistant="hooked")
    assert all("ask: topic" not in str(m.get("content")) for m in fake.requests[-1].messages)  # hidden from models
    await close(rt)


async def test_a_failing_next_keeps_the_reply_and_resume_reruns_only_the_hook(
    tmp_path: Path, store: SqlStore, fake: ScriptedModel
) -> None:
    hook_path = tmp_path / "app" / "hooks" / "h.js"
    rt = make_runtime(
        tmp_path / "app", store, hooked(fake, "function Next(ctx, payload) { throw new Error('not yet') }"), model=fake
    )
    fake.enqueue(Reply(text="the reply"))
    end = end_of(await turn(rt, "hi", assistant="hooked"))
    assert (end.reason, end.error["message"]) == ("hook_error", "Error: not yet")
    assert await stored(rt) == [("user", "hi", "completed"), ("assistant", "the reply", "completed")]
    point = await rt.store.resume_point(ALICE, "c1")
    assert point is not None and [(s.type, s.status) for s in point.steps] == [("hook_next", "failed")]

    hook_path.write_text("function Next(ctx, payload) { return {data: {saw: payload.completion.content}} }\n")
    runs_of(rt).process.adopt(load_app(tmp_path / "app"))  # the fixed hook is a new app version (as a reload serves it)
    handle = await runs_of(rt).resume(ALICE, "c1")
    events = [e async for e in handle.events()]
    end = end_of(events)
    assert (end.status, end.next) == ("completed", {"saw": "the reply"})
    assert len(fake.requests) == 1  # the model was not called again
    assert await stored(rt) == [("user", "hi", "completed"), ("assistant", "the reply", "completed")]
    await close(rt)


async def test_next_can_delegate_after_the_model_replied(make: Make, fake: ScriptedModel) -> None:
    rt = make(
        "function Next(ctx, payload) { return {delegate: {assistant_id: 'expert', "
        "messages: [{role: 'user', content: 'check: ' + payload.completion.content}]}} }",
        more={"assistants/expert/assistant.yml": "name: Expert\nconnector: demo.echo\n"},
    )
    fake.enqueue(Reply(text="draft answer"))
    events = await turn(rt, "question", assistant="hooked")
    assert end_of(events).status == "completed"
    rows = await rt.store.history(ALICE, "c1")
    assert [(m.content, m.thread_id is not None) for m in rows] == [
        ("question", False),
        ("draft answer", False),
        ("echo: check: draft answer", True),
    ]
    await close(rt)


# --- Create: every return shape ---------------------------------------------------------------------------


async def test_create_chooses_the_mcp_servers(make: Make, fake: ScriptedModel) -> None:
    rt = in_process(make(
        "function Create() { return {mcp_servers: [{server: 'testing', tools: ['add', 'echo']}]} }",
        more={"mcps/testing.yml": "command: python\nargs: [-m, tests.support.mcp_server]\n"},
    ))  # fmt: skip
    fake.enqueue(Reply(text="with tools"))
    assert end_of(await turn(rt, "hi", assistant="hooked")).status == "completed"
    [request] = fake.requests
    assert sorted(t["function"]["name"] for t in request.body["tools"]) == ["testing__add", "testing__echo"]
    await close(rt)
    await rt.tools.aclose()


async def test_next_sees_the_servers_and_approvals_create_chose(make: Make, fake: ScriptedModel) -> None:
    """The run's options as JSON: the servers as objects (they used to reach the hook as Python objects, and
    the run failed with an internal error)."""
    rt = in_process(make(
        "function Create() { return {top_p: 0.5, mcp_servers: [{server: 'testing', tools: ['add']}],\n"
        "                            require_approval: ['testing__echo'], max_tokens: 20} }\n"
        "function Next(ctx, payload, options) { return {data: options} }",
        more={"mcps/testing.yml": "command: python\nargs: [-m, tests.tools.servers]\n"},
    ))  # fmt: skip
    fake.enqueue(Reply(text="ok"))
    end = end_of(await turn(rt, "hi", assistant="hooked"))
    assert end.status == "completed"
    servers = [{"server": "testing", "tools": ["add"], "approve": []}]
    assert list(end.next.items()) == [  # as set: Create's options in the order it may give them, then the rest
        ("connector", "use::default"), ("metadata", {}), ("locale", "en"), ("max_tokens", 20), ("top_p", 0.5),
        ("mcp_servers", servers), ("require_approval", ["testing__echo"])]  # fmt: skip
    assert (fake.requests[0].body["max_tokens"], fake.requests[0].body["top_p"]) == (20, 0.5)
    await close(rt)
    await rt.tools.aclose()


async def test_a_call_option_create_may_not_set_is_an_unknown_key(make: Make, fake: ScriptedModel) -> None:
    """`stop` is a call option a request may set, not a Create hook: reported as any unknown key, naming
    what Create may return, and nothing of the answer is applied."""
    rt = make("function Create() { return {temperature: 0.3, stop: ['END']} }")
    end = end_of(await turn(rt, "hi", assistant="hooked"))
    assert (end.status, end.reason) == ("failed", "hook_error")
    assert end.error is not None and end.error["message"] == (
        "Create returned unknown key 'stop' (expected one of: messages, connector, prompt_preset, temperature, "
        "max_tokens, max_completion_tokens, top_p, metadata, locale, mcp_servers, disable_global_prompts, "
        "delegate, require_approval, search)"
    )
    assert fake.requests == []
    [create] = [s for s in await steps_of(rt, end.run_id) if s.type == "hook_create"]
    assert (create.status, create.output) == ("failed", None)
    await close(rt)


async def test_create_sets_the_locale_the_prompts_and_next_see(make: Make, fake: ScriptedModel) -> None:
    rt = make(
        "function Create() { return {locale: 'fr'} }\n"
        "function Next(ctx, payload, options) { return {data: [ctx.locale, options.locale]} }",
        "name: Hooked\nhook: hooks/h.js\nprompts:\n  - {role: system, content: 'Answer in {{ locale }}.'}\n",
    )  # fmt: skip
    fake.enqueue(Reply(text="bonjour"))
    end = end_of(await turn(rt, "hi", assistant="hooked"))
    assert end.next == ["fr", "fr"]
    assert fake.requests[0].messages[0] == {"role": "system", "content": "Answer in fr."}
    await close(rt)


async def test_create_metadata_is_merged_into_the_runs(make: Make, fake: ScriptedModel) -> None:
    rt = make("function Create() { return {metadata: {route: 'light', channel: 'hook'}} }\n"
              "function Next(ctx) { return {data: ctx.metadata} }")  # fmt: skip
    fake.enqueue(Reply(text="ok"))
    request = RunRequest("hooked", ALICE, [{"role": "user", "content": "hi"}], chat_id="c1",
                         metadata={"channel": "web", "plan": "pro"})  # fmt: skip
    end = end_of([e async for e in runs_of(rt).stream(request)])
    assert end.next == {"channel": "hook", "plan": "pro", "route": "light"}
    await close(rt)


WRONG_NAMES = "of the wrong shape (expected a list of tool names)"


@pytest.mark.parametrize(
    ("returned", "message"),
    [
        (
            "{temprature: 0.2}",
            "Create returned unknown key 'temprature' (expected one of: messages, connector, "
            "prompt_preset, temperature, max_tokens, max_completion_tokens, top_p, metadata, locale, mcp_servers, "
            "disable_global_prompts, delegate, require_approval, search)",
        ),
        ("5", "Create returned int (expected an object or null)"),
        (
            "{require_approval: 'all'}",
            "Create returned require_approval of the wrong shape (expected a list of tool names)",
        ),
        (
            "{require_approval: [1]}",
            "Create returned require_approval of the wrong shape (expected a list of tool names)",
        ),
        ("[{temperature: 1}]", "Create returned list (expected an object or null)"),
        ("'terse'", "Create returned str (expected an object or null)"),
        ("{temperature: 'hot'}", "Create returned temperature of type str"),
        ("{metadata: [1]}", "Create returned metadata of type list"),
        ("{prompt_preset: 'friendly'}", "Create chose unknown prompt preset 'friendly' (known: terse)"),
        ("{connector: 'no.such'}", "Create chose unknown connector 'no.such' (known: demo.echo, fake.model)"),
        ("{mcp_servers: ['wether']}", "Create chose unknown MCP server 'wether' (known: none)"),
    ],
)
async def test_create_returning_what_it_may_not_is_a_hook_error(
    make: Make, fake: ScriptedModel, returned: str, message: str
) -> None:
    rt = make(f"function Create() {{\n  return {returned};\n}}\n")
    end = end_of(await turn(rt, "hi", assistant="hooked"))
    assert (end.status, end.reason) == ("failed", "hook_error")
    assert end.error == {"file": "hooks/h.js", "line": None, "message": message}
    assert fake.requests == []
    await close(rt)


# --- Next: every return shape -----------------------------------------------------------------------------


async def test_next_returning_null_keeps_the_reply(make: Make, fake: ScriptedModel) -> None:
    rt = make("function Next(ctx, payload) { return null }")
    fake.enqueue(Reply(text="kept"))
    end = end_of(await turn(rt, "hi", assistant="hooked"))
    assert (end.status, end.next) == ("completed", None)
    assert await stored(rt) == [("user", "hi", "completed"), ("assistant", "kept", "completed")]
    await close(rt)


@pytest.mark.parametrize(
    ("returned", "message"),
    [
        (
            "{metadata: {k: 1}}",
            "Next returned unknown key 'metadata' (expected one of: data, delegate, continue, stop)",
        ),
        ("'done'", "Next returned str (expected an object or null)"),
        ("[1, 2]", "Next returned list (expected an object or null)"),
    ],
)
async def test_next_returning_what_it_may_not_is_a_hook_error(
    make: Make, fake: ScriptedModel, returned: str, message: str
) -> None:
    rt = make(f"function Next() {{ return {returned} }}")
    fake.enqueue(Reply(text="the reply"))
    end = end_of(await turn(rt, "hi", assistant="hooked"))
    assert (end.reason, end.error["message"]) == ("hook_error", message)
    assert ("assistant", "the reply", "completed") in await stored(rt)  # the model's reply is kept
    await close(rt)


async def test_next_continue_stops_at_max_turns(make: Make, fake: ScriptedModel) -> None:
    rt = make(
        "function Next() { return {continue: {messages: [{role: 'user', content: 'more'}]}} }",
        more={"app.yml": "roles:\n  default: fake.model\nlimits: {max_turns: 2}\n"},
    )
    fake.enqueue(Reply(text="one"), Reply(text="two"), Reply(text="three"))
    end = end_of(await turn(rt, "hi", assistant="hooked"))
    assert (end.status, end.reason) == ("failed", "max_turns")
    assert len(fake.requests) == 2
    await close(rt)


@pytest.mark.parametrize("returned", ["{continue: {messages: []}}", "{continue: {}}"])
async def test_next_continue_without_messages_asks_the_model_again(
    make: Make, fake: ScriptedModel, returned: str
) -> None:
    """No new message is meaningful: the model is asked again with the conversation as it is, as many
    times as `max_turns` allows."""
    rt = make(f"function Next() {{ return {returned} }}",
              more={"app.yml": "roles:\n  default: fake.model\nlimits: {max_turns: 3}\n"})  # fmt: skip
    fake.enqueue(Reply(text="one"), Reply(text="two"), Reply(text="three"))
    end = end_of(await turn(rt, "hi", assistant="hooked"))
    assert (end.status, end.reason) == ("failed", "max_turns")
    assert [r.messages for r in fake.requests] == [
        [{"role": "user", "content": "hi"}],
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "one"}],
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "one"},
         {"role": "assistant", "content": "two"}],
    ]  # fmt: skip
    view = await rt.store.run_view(ALICE, "c1", end.run_id)
    assert view is not None
    assert [s.transition for s in view.steps if s.type == "llm"] == ["first", "hook_continue", "hook_continue"]
    await close(rt)


async def test_next_continue_that_is_no_object_is_a_hook_error(make: Make, fake: ScriptedModel) -> None:
    rt = make("function Next() { return {continue: 'yes'} }")
    fake.enqueue(Reply(text="the reply"))
    end = end_of(await turn(rt, "hi", assistant="hooked"))
    assert (end.reason, end.error["message"]) == (
        "hook_error", "Next returned continue of type str (expected {messages?: [...]})")  # fmt: skip
    await close(rt)


async def test_next_with_on_error_ignore_keeps_the_reply(
    make: Make, fake: ScriptedModel, caplog: pytest.LogCaptureFixture
) -> None:
    rt = make("function Next() {\n  throw new Error('no summary today');\n}",
              "name: Hooked\nhook: hooks/h.js\nhook_policy: {on_error: ignore}\n")  # fmt: skip
    fake.enqueue(Reply(text="answer"))
    end = end_of(await turn(rt, "hi", assistant="hooked"))
    assert (end.status, end.next) == ("completed", None)
    assert "hooks/h.js:2 Next failed and is ignored (on_error: ignore): Error: no summary today" in caplog.text
    [step] = [s for s in await steps_of(rt, end.run_id) if s.type == "hook_next"]
    assert (step.status, step.error) == (
        "recovered",  # failed, and the run went on: never where a resume starts
        {"file": "hooks/h.js", "line": 2, "message": "Error: no summary today"},
    )
    await close(rt)


# --- what the steps record --------------------------------------------------------------------------------


async def steps_of(rt: Runtime, run_id: str) -> list[Any]:
    """The run's steps as stored."""
    store = rt.store
    assert isinstance(store, SqlStore)
    query = select(steps).where(steps.c.run_id == run_id).order_by(steps.c.seq)
    return await store.db.read_tx(lambda tx: tx.all(query))


async def test_hook_steps_keep_their_input_and_output(make: Make, fake: ScriptedModel) -> None:
    rt = make("function Create() { return {temperature: 0.3} }\nfunction Next() { return {data: {n: 1}} }")
    fake.enqueue(Reply(text="ok"))
    end = end_of(await turn(rt, "hi", assistant="hooked"))
    rows = {s.type: s for s in await steps_of(rt, end.run_id)}
    create, nxt = rows["hook_create"], rows["hook_next"]
    assert (create.status, create.output) == ("completed", {"temperature": 0.3})
    assert create.input["function"] == "Create"
    assert create.input["args"][0] == [{"role": "user", "content": "hi"}]
    assert create.input["args"][1]["metadata"] == {}  # as the hook saw it
    assert (nxt.status, nxt.output, nxt.input["function"]) == ("completed", {"data": {"n": 1}}, "Next")
    assert nxt.input["args"][0]["completion"]["content"] == "ok"
    await close(rt)


async def test_a_failed_hook_step_stores_file_line_and_message(make: Make, fake: ScriptedModel) -> None:
    rt = make("function Create() {\n\n  undefinedHelper();\n}")
    end = end_of(await turn(rt, "hi", assistant="hooked"))
    [step] = await steps_of(rt, end.run_id)
    assert (step.type, step.status) == ("hook_create", "failed")
    assert step.error == {"file": "hooks/h.js", "line": 3, "message": "ReferenceError: undefinedHelper is not defined"}
    await close(rt)


# --- children -------------------------------------------------------------------------------------------


async def test_a_child_that_fails_in_ctx_call_is_an_error_the_hook_can_catch(make: Make, fake: ScriptedModel) -> None:
    rt = make(
        """
        async function Create(ctx) {
          try { await ctx.call("expert", null); } catch (e) { return {metadata: {seen: e.message, stack: e.stack}}; }
        }
        function Next(ctx) { return {data: ctx.metadata} }
    """,
        more={"hooks/expert.js": "function Create() { throw new Error('child hook boom') }\n",
              "assistants/expert/assistant.yml": "name: Expert\nhook: hooks/expert.js\n"},
    )  # fmt: skip
    fake.enqueue(Reply(text="answered anyway"))
    end = end_of(await turn(rt, "hi", assistant="hooked"))
    assert end.status == "completed"
    message = "assistant 'expert' failed with hook_error (hooks/expert.js:1): Error: child hook boom"
    assert end.next["seen"] == message
    assert end.next["stack"].split("\n")[:2] == [f"Error: {message}", "    at Create (yao-hook-file:3:19)"]
    assert "yao-hook-runtime" not in end.next["stack"]
    delegation = [s for s in await steps_of(rt, end.run_id) if s.type == "delegate"]
    assert [(s.status, s.error) for s in delegation] == [
        ("failed", {"file": "hooks/expert.js", "line": 1, "message": "Error: child hook boom"})
    ]
    await close(rt)


async def test_a_ctx_call_cycle_ends_with_delegate_error(make: Make, fake: ScriptedModel) -> None:
    catching = "async function Create(ctx) {{ try {{ await ctx.call('{0}', null) }} catch (e) {{ return null }} }}\n"
    rt = make("", more={
        "hooks/a.js": catching.format("b"), "hooks/b.js": catching.format("a"),
        "assistants/a/assistant.yml": "name: A\nhook: hooks/a.js\n",
        "assistants/b/assistant.yml": "name: B\nhook: hooks/b.js\n",
        "app.yml": "roles:\n  default: fake.model\nlimits: {max_delegate_depth: 3}\n",
    })  # fmt: skip
    end = end_of(await turn(rt, "loop", assistant="a"))
    assert (end.status, end.reason) == ("failed", "delegate_error")
    assert end.error["message"] == "delegation deeper than 3 (limits.max_delegate_depth): a → b → a → b → a"
    assert fake.requests == []
    await close(rt)


async def test_a_failing_next_in_a_delegated_child_resumes_only_that_hook(
    tmp_path: Path, store: SqlStore, fake: ScriptedModel
) -> None:
    expert_hook = tmp_path / "app" / "hooks" / "expert.js"
    rt = make_runtime(tmp_path / "app", store, hooked(fake, "", more={
        **DELEGATE_FILES,
        "hooks/expert.js": "function Next() { throw new Error('not yet') }\n",
        "assistants/expert/assistant.yml": "name: Expert\nhook: hooks/expert.js\n",
    }), model=fake)  # fmt: skip
    fake.enqueue(Reply(text="the expert's reply"))
    end = end_of(await turn(rt, "hard one", assistant="front"))
    assert (end.reason, end.error["file"]) == ("hook_error", "hooks/expert.js")
    point = await rt.store.resume_point(ALICE, "c1")
    assert point is not None and [(s.type, s.status) for s in point.steps] == [
        ("delegate", "failed"), ("hook_next", "failed")]  # fmt: skip

    expert_hook.write_text("function Next(ctx, payload) { return {data: {saw: payload.completion.content}} }\n")
    runs_of(rt).process.adopt(load_app(tmp_path / "app"))
    events = [e async for e in (await runs_of(rt).resume(ALICE, "c1")).events()]
    end = end_of(events)
    assert (end.status, end.next) == ("completed", {"saw": "the expert's reply"})
    assert len(fake.requests) == 1  # the child's model was not called again
    rows = await rt.store.history(ALICE, "c1")
    assert [(m.role, m.content, m.thread_id is not None) for m in rows] == [
        ("user", "hard one", False), ("assistant", "the expert's reply", True)]  # fmt: skip
    resumed = [(s.type, s.status, s.thread_id is not None) for s in await steps_of(rt, end.run_id)]
    assert resumed == [("delegate", "completed", True), ("hook_next", "completed", True)]  # no Create, no model
    await close(rt)
