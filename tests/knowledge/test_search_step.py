"""The search step in a run (CONTRACT §9.1): references before the model, a `references` event before the
first text, a stored `search` step, citations checked on the stored reply, Create's say, the `auto` and
`tool` modes, web results through an MCP tool, a failing search that never fails the run, and a resume that
keeps what its run found."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from tests.support.runtimes import ALICE, app_files, close, end_of, make_runtime, runs_of, turn
from tests.support.tools import in_process
from yao_agent.events import MessageStart, References, StreamEnd, ToolResult
from yao_agent.identity import OPERATOR, Identity
from yao_agent.knowledge.ingest import Upload
from yao_agent.pipeline import Runtime
from yao_agent.store import SqlStore
from yao_agent.store.schema import steps
from yao_agent.testing import Reply, ScriptedModel, ToolCall

pytestmark = pytest.mark.both_stores  # what it tests is what the database does

BOB = Identity("bob", "acme")
EVE = Identity("eve", "beta")
LEAVE = b"# Leave\n\n## Annual leave\n\nFull-time staff receive 25 days of paid annual leave per year.\n"
EXPENSES = b"# Expenses\n\n## Meals\n\nThe daily meal allowance is 45 euros in Europe.\n"


def files(base_url: str, **more: str) -> dict[str, str]:
    made = app_files(base_url)
    made |= {
        "knowledge/handbook.yml": "name: Handbook\n",
        "connectors/demo/no.yml": "type: scripted\nrules:\n  - reply: 'no'\n",
        "connectors/demo/yes.yml": "type: scripted\nrules:\n  - reply: 'yes'\n",
        "assistants/kb/assistant.yml": "name: KB\nsearch: {knowledge: [handbook], top_k: 2}\n",
        "assistants/teamkb/assistant.yml": "name: Team KB\nsearch: {knowledge: [team]}\n",
        "assistants/tooly/assistant.yml": "name: Tooly\nsearch: {knowledge: [handbook], mode: tool}\n",
    }
    return made | more


async def stocked(rt: Runtime) -> Runtime:
    for name, data in (("leave.md", LEAVE), ("expenses.md", EXPENSES)):
        await rt.knowledge.add(OPERATOR, "handbook", Upload(name, data, source=f"upload:{name}"))
    return rt


@pytest.fixture
async def rt(tmp_path: Path, fake: ScriptedModel, store: SqlStore) -> Any:
    runtime = await stocked(make_runtime(tmp_path / "app", store, files(fake.base_url), model=fake))
    try:
        yield runtime
    finally:
        await close(runtime)


def systems(fake: ScriptedModel, index: int = 0) -> list[str]:
    return [m["content"] for m in fake.requests[index].messages if m["role"] == "system"]


async def search_steps(store: SqlStore) -> list[Any]:
    """(status, output) of every stored `search` step, in the order they were made."""
    query = select(steps.c.status, steps.c.output).where(steps.c.type == "search").order_by(steps.c.started_at)
    return [(row[0], row[1]) for row in await store.db.read_tx(lambda tx: tx.all(query))]


async def intent_calls(store: SqlStore) -> list[Any]:
    """The `llm` steps made to decide whether to search."""
    query = select(steps.c.output).where(steps.c.type == "llm")
    outputs: list[dict[str, Any]] = [row[0] or {} for row in await store.db.read_tx(lambda tx: tx.all(query))]
    return [output for output in outputs if output.get("purpose")]


async def test_the_model_gets_numbered_references_and_the_reply_citations_are_checked(
    rt: Runtime, fake: ScriptedModel, store: SqlStore
) -> None:
    fake.enqueue(Reply(text="You get 25 days [1], and see [7]."))
    events = await turn(rt, "How many days of annual leave do I get?", assistant="kb")
    assert end_of(events).status == "completed"
    [given] = [e for e in events if isinstance(e, References)]
    assert events.index(given) < next(i for i, e in enumerate(events) if isinstance(e, MessageStart))
    first = given.references[0]
    assert (first["n"], first["collection"], first["title"], first["source"]) == (1, "handbook", "Leave", "kb")
    assert "25 days" in first["text"] and first.get("heading") == "Leave › Annual leave"
    [prompt] = [s for s in systems(fake) if "[1]" in s]
    assert "25 days of paid annual leave" in prompt and "not instructions" in prompt
    reply = (await rt.store.history(ALICE, "c1"))[-1]
    assert reply.cited is not None
    assert (reply.cited.citations, reply.cited.unknown) == ((1,), (7,))
    shown: dict[str, Any] = dict(reply.to_api())
    assert shown["citations"] == [1] and shown["unknown_citations"] == [7]
    assert shown["references"][0]["title"] == "Leave"
    [(status, output)] = await search_steps(store)
    assert status == "completed" and output["query"] == "How many days of annual leave do I get?"
    assert output["found"][0]["collection"] == "handbook"


async def test_create_switches_search_off_or_rewrites_its_query(
    tmp_path: Path, fake: ScriptedModel, store: SqlStore
) -> None:
    hook = "function Create(ctx, messages) { return messages[0].content.startsWith('quiet') ? {search: false} " \
           ": {search: {query: 'meal allowance', top_k: 1}}; }"  # fmt: skip
    more = {"assistants/kb/assistant.yml": "name: KB\nhook: hooks/kb.js\nsearch: {knowledge: [handbook]}\n",
            "hooks/kb.js": hook}  # fmt: skip
    rt = await stocked(make_runtime(tmp_path / "app", store, files(fake.base_url, **more), model=fake))
    fake.enqueue(Reply(text="a"), Reply(text="b"))
    quiet = await turn(rt, "quiet please: annual leave?", assistant="kb")
    assert not [e for e in quiet if isinstance(e, References)] and not [s for s in systems(fake) if "[1]" in s]
    loud = await turn(rt, "annual leave?", chat_id="c2", assistant="kb")
    [given] = [e for e in loud if isinstance(e, References)]
    assert [r["title"] for r in given.references] == ["Expenses"]  # the hook's query, and its top_k
    await close(rt)


async def test_auto_searches_only_when_the_intent_check_says_so(
    tmp_path: Path, fake: ScriptedModel, store: SqlStore
) -> None:
    auto = "name: {name}\nsearch: {{knowledge: [handbook], mode: auto, intent_with: demo.{say}}}\n"
    more = {"assistants/ask/assistant.yml": auto.format(name="Ask", say="no"),
            "assistants/yes/assistant.yml": auto.format(name="Sure", say="yes")}  # fmt: skip
    rt = await stocked(make_runtime(tmp_path / "app", store, files(fake.base_url, **more), model=fake))
    fake.enqueue(Reply(text="hi"), Reply(text="25 days [1]"))
    skipped = await turn(rt, "hello there, annual leave", assistant="ask")
    assert not [e for e in skipped if isinstance(e, References)]
    searched = await turn(rt, "annual leave", chat_id="c2", assistant="yes")
    assert [e for e in searched if isinstance(e, References)]
    made = await intent_calls(store)
    assert [m["purpose"] for m in made] == ["search_intent", "search_intent"]  # both checks recorded (and metered)
    assert all(m["connector"] in ("demo.no", "demo.yes") for m in made)
    await close(rt)


async def test_tool_mode_gives_the_model_a_search_tool(rt: Runtime, fake: ScriptedModel) -> None:
    fake.enqueue(Reply(tool_calls=(ToolCall("search_knowledge", {"query": "meal allowance"}, id="k1"),)),
                 Reply(text="45 euros a day [1]."))  # fmt: skip
    events = await turn(rt, "what can I spend on food?", assistant="tooly")
    assert end_of(events).status == "completed"
    assert [t["function"]["name"] for t in fake.requests[0].tools or []] == ["search_knowledge"]
    [result] = [e for e in events if isinstance(e, ToolResult)]
    assert result.error is None and "45 euros" in str(result.result) and "[1]" in str(result.result)
    reply = (await rt.store.history(ALICE, "c1"))[-1]
    assert reply.cited is not None and reply.cited.citations == (1,)


async def test_a_team_collection_is_searched_for_its_members_only(rt: Runtime, fake: ScriptedModel) -> None:
    await rt.knowledge.create(OPERATOR, "policies", None, team="acme")
    await rt.knowledge.add(OPERATOR, "acme:policies", Upload("p.md", b"# Parking\n\nAcme parking is on level 2.\n"),
                           team="acme")  # fmt: skip
    fake.enqueue(Reply(text="level 2 [1]"), Reply(text="no idea"))
    mine = await turn(rt, "where is parking?", who=BOB, assistant="teamkb")
    [given] = [e for e in mine if isinstance(e, References)]
    assert given.references[0]["collection"] == "acme:policies"
    theirs = await turn(rt, "where is parking?", chat_id="c9", who=EVE, assistant="teamkb")
    assert not [e for e in theirs if isinstance(e, References)]
    assert not [s for s in systems(fake, 1) if "parking" in s.lower()]


async def test_a_failing_search_is_stored_and_the_run_goes_on(
    tmp_path: Path, fake: ScriptedModel, store: SqlStore
) -> None:
    more = {"mcps/testing.yml": "command: python\nargs: [-m, tests.support.mcp_server]\n",
            "assistants/web/assistant.yml": "name: Web\nsearch: {web: {server: testing, tool: lookup}}\n"}  # fmt: skip
    rt = in_process(make_runtime(tmp_path / "app", store, files(fake.base_url, **more), model=fake))
    fake.enqueue(Reply(text="said [1]"), Reply(text="answered anyway"))
    found = await turn(rt, "tides", assistant="web")
    [given] = [e for e in found if isinstance(e, References)]
    assert given.references[0]["source"] == "web" and given.references[0].get("url") == "https://example.org/a"
    failed = await turn(rt, "fail", chat_id="c2", assistant="web")
    assert end_of(failed).status == "completed" and not [e for e in failed if isinstance(e, References)]
    statuses = sorted(status for status, _ in await search_steps(store))
    assert statuses == ["completed", "recovered"]
    await close(rt)


async def test_a_resumed_run_keeps_its_references_and_does_not_search_again(
    rt: Runtime, fake: ScriptedModel, store: SqlStore
) -> None:
    fake.enqueue(Reply(status=500, error_message="upstream down"), Reply(text="25 days [1]"))
    failed = await turn(rt, "annual leave?", assistant="kb")
    assert end_of(failed).status == "failed"
    resumed = [e async for e in (await runs_of(rt).resume(ALICE, "c1")).events()]
    assert isinstance(resumed[-1], StreamEnd) and resumed[-1].status == "completed"
    assert systems(fake, 1) == systems(fake, 0)  # the same references, without a second search
    assert len(await search_steps(store)) == 1
    reply = (await rt.store.history(ALICE, "c1"))[-1]
    assert reply.cited is not None and reply.cited.citations == (1,)


async def test_a_hook_searches_with_ctx_search(tmp_path: Path, fake: ScriptedModel, store: SqlStore) -> None:
    hook = """
      async function Create(ctx, messages) {
        const found = await ctx.search("meal allowance", {knowledge: ["handbook"], top_k: 1});
        const none = await ctx.search("meal allowance", {knowledge: ["acme:secret"]});
        return {messages: [{role: "user", content: found[0].title + " " + found[0].n + " " + none.length}]};
      }
    """
    more = {"assistants/h/assistant.yml": "name: H\nhook: hooks/h.js\n", "hooks/h.js": hook}
    rt = await stocked(make_runtime(tmp_path / "app", store, files(fake.base_url, **more), model=fake))
    fake.enqueue(Reply(text="ok"))
    assert end_of(await turn(rt, "x", assistant="h")).status == "completed"
    assert fake.requests[0].messages[-1]["content"] == "Expenses 1 0"
    await close(rt)


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("{search: {top_k: 0}}", "search.top_k must be a whole number from 1 to 50"),
        ("{search: {query: ''}}", "search.query must be non-empty text"),
        ("{search: {knowledge: 'handbook'}}", "search.knowledge must be a list of collection ids"),
        ("{search: {where: 'x'}}", "search must be false or {query?, knowledge?, top_k?}"),
    ],
)
async def test_create_returning_a_wrong_search_is_a_hook_error(
    tmp_path: Path, fake: ScriptedModel, store: SqlStore, given: str, said: str
) -> None:
    more = {
        "assistants/h/assistant.yml": "name: H\nhook: hooks/h.js\n",
        "hooks/h.js": f"function Create() {{ return {given}; }}",
    }
    rt = make_runtime(tmp_path / "app", store, files(fake.base_url, **more), model=fake)
    end = end_of(await turn(rt, "x", assistant="h"))
    assert (end.status, end.reason) == ("failed", "hook_error") and said in str(end.error)
    await close(rt)


async def test_ctx_search_refuses_options_of_the_wrong_shape(
    tmp_path: Path, fake: ScriptedModel, store: SqlStore
) -> None:
    hook = """
      async function Create(ctx, messages) {
        const said = [];
        for (const options of [7, {knowledge: "handbook"}, {top_k: 99}, {filter: {dept: 1}}]) {
          try { await ctx.search("x", options); said.push("ok"); } catch (e) { said.push(e.message); }
        }
        return {messages: [{role: "user", content: said.join(" | ")}]};
      }
    """
    more = {"assistants/h/assistant.yml": "name: H\nhook: hooks/h.js\n", "hooks/h.js": hook}
    rt = make_runtime(tmp_path / "app", store, files(fake.base_url, **more), model=fake)
    fake.enqueue(Reply(text="ok"))
    assert end_of(await turn(rt, "x", assistant="h")).status == "completed"
    said = fake.requests[0].messages[-1]["content"].split(" | ")
    assert [s.split(":")[0] for s in said] == ["ctx.search"] * 4
    assert "options must be an object" in said[0] and "knowledge must be a list" in said[1]
    assert "top_k must be a whole number" in said[2] and "filter must map metadata keys to text" in said[3]
    await close(rt)
