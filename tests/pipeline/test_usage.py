"""What a run used and cost (CONTRACT §5 `usage`, §8.2): every model call of the run tree counted, priced
from the connector's `pricing` or litellm's published map, and written to the usage ledger."""
# pyright: reportTypedDictNotRequiredAccess=false
# (an answer's optional keys are read as present: a missing one is a KeyError, which fails the test)

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from tests.support.runtimes import ALICE, app_files, end_of, make_runtime, runs_of, turn
from yao_agent.dsl.specs import ConnectorSpec, Pricing
from yao_agent.events import Event, MessageDelta, MessageEnd
from yao_agent.identity import Identity
from yao_agent.metering.pricing import Price, price_of, published
from yao_agent.metering.tokens import counter_for
from yao_agent.pipeline import RunRequest, Runtime
from yao_agent.store import SqlStore
from yao_agent.store.ledger import scope_of, shown
from yao_agent.store.quota import Own
from yao_agent.store.schema import usage_ledger
from yao_agent.testing import Reply, ScriptedModel

pytestmark = pytest.mark.both_stores  # what it tests is what the database does

PRICED = "pricing: {input_per_mtok: 2.0, output_per_mtok: 8.0}\n"


def used(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def runtime(tmp_path: Path, store: SqlStore, fake: ScriptedModel, more: dict[str, str] | None = None,
            connector: str = PRICED) -> Runtime:  # fmt: skip
    files = app_files(fake.base_url)
    files["connectors/fake/model.yml"] += connector
    return make_runtime(tmp_path / "app", store, {**files, **(more or {})}, model=fake)


async def ledger_rows(rt: Runtime) -> list[tuple[Any, ...]]:
    columns = (usage_ledger.c.assistant_id, usage_ledger.c.connector, usage_ledger.c.input_tokens,
               usage_ledger.c.output_tokens, usage_ledger.c.cost_usd)  # fmt: skip
    query = select(*columns).order_by(usage_ledger.c.at, usage_ledger.c.step_id)
    return [tuple(row) for row in await rt.store.db.read_tx(lambda tx: tx.all(query))]


async def test_a_run_is_priced_from_its_connectors_pricing(
    tmp_path: Path, store: SqlStore, fake: ScriptedModel
) -> None:
    rt = runtime(tmp_path, store, fake)
    try:
        fake.enqueue(Reply(text="Hi.", usage=used(1000, 250)))
        end = end_of(await turn(rt, "hello"))
        # 1000 in at $2/Mtok + 250 out at $8/Mtok = $0.004
        assert end.usage == {"input_tokens": 1000, "output_tokens": 250, "total_tokens": 1250, "cost_usd": 0.004,
                             "calls": 1}  # fmt: skip
        assert await ledger_rows(rt) == [("chat", "fake.model", 1000, 250, 0.004)]
        run = await rt.store.latest_run(ALICE, "c1")
        assert run is not None and run.usage == end.usage  # stored with the run
    finally:
        await rt.engines.aclose()


async def test_an_unknown_price_leaves_the_cost_null_and_the_tokens_counted(
    tmp_path: Path, store: SqlStore, fake: ScriptedModel
) -> None:
    rt = runtime(tmp_path, store, fake, connector="")  # `model: text` is in no price map
    try:
        fake.enqueue(Reply(text="Hi.", usage=used(10, 5)))
        end = end_of(await turn(rt, "hello"))
        assert (end.usage["total_tokens"], end.usage["cost_usd"]) == (15, None)
        assert await ledger_rows(rt) == [("chat", "fake.model", 10, 5, None)]
    finally:
        await rt.engines.aclose()


def test_litellms_published_price_is_read_without_importing_litellm() -> None:
    known = ConnectorSpec(id="o", type="openai", file="x.yml", model="gpt-4o-mini")
    price = price_of(known)
    assert price is not None and price.input > 0 and price.output > price.input
    assert published("openai", "no-such-model-anywhere") is None
    probe = "import sys; from yao_agent.metering.pricing import published; published('openai', 'gpt-4o')\n"
    probe += "print('litellm' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    assert done.stdout.strip() == "False"  # a cold CLI never pays for importing litellm to price a call
    own = ConnectorSpec(id="o", type="openai", file="x.yml", model="gpt-4o-mini", pricing=Pricing(1.0, 3.0))
    assert price_of(own) == Price(1e-6, 3e-6)  # the connector's own price wins
    scripted = ConnectorSpec(id="s", type="scripted", file="s.yml", model="scripted")
    assert price_of(scripted) == Price(0.0, 0.0)  # a script costs nothing


@pytest.mark.parametrize("how", ["cancelled", "broke"])
async def test_a_reply_cut_off_midway_counts_what_was_sent_and_said(
    tmp_path: Path, store: SqlStore, fake: ScriptedModel, how: str
) -> None:
    """The provider's usage comes with its last chunk, which a cut-off reply never gets: the request and
    what streamed are counted as the context budget counts them, priced, and marked estimated — in the
    run's usage, its step and the ledger (not 0 tokens, as if the call were free)."""
    rt = runtime(tmp_path, store, fake)
    try:
        said, billed = "word " * 100, used(999, 999)  # the usage the provider would have sent last
        fake.enqueue(Reply(text=said, chunk_size=5, usage=billed, stall_after=4, stall_s=30) if how == "cancelled"
                     else Reply(text=said, chunk_size=5, usage=billed, drop_after=4))  # fmt: skip
        asked = [{"role": "user", "content": "tell me"}]
        handle = await runs_of(rt).start(RunRequest("chat", ALICE, asked, chat_id="c1"))
        events: list[Event] = []
        async for event in handle.events():
            events.append(event)
            if how == "cancelled" and sum(isinstance(e, MessageDelta) for e in events) == 2:
                handle.cancel()
        end = end_of(events)
        assert end.status == ("cancelled" if how == "cancelled" else "failed")
        [shown] = [e.content for e in events if isinstance(e, MessageEnd)]
        counter = counter_for(["text"])
        [sent] = fake.requests
        tokens_in, tokens_out = counter.request(sent.messages, sent.tools or []), counter.text(str(shown))
        assert 0 < tokens_out < counter.text("word " * 100)
        cost = round((tokens_in * 2.0 + tokens_out * 8.0) / 1e6, 8)
        assert end.usage == {"input_tokens": tokens_in, "output_tokens": tokens_out,
                             "total_tokens": tokens_in + tokens_out, "cost_usd": cost, "calls": 1}  # fmt: skip
        assert await ledger_rows(rt) == [("chat", "fake.model", tokens_in, tokens_out, cost)]
        view = await rt.store.run_view(ALICE, "c1", end.run_id)
        assert view is not None
        [step] = view.to_api()["steps"]
        assert step.get("usage") == {"input_tokens": tokens_in, "output_tokens": tokens_out, "cost_usd": cost,
                                 "estimated": True}  # fmt: skip
    finally:
        await rt.engines.aclose()


@pytest.mark.parametrize("how", ["delegate", "ctx.call"])
async def test_a_childs_calls_roll_up_into_the_run(
    tmp_path: Path, store: SqlStore, fake: ScriptedModel, how: str
) -> None:
    hooks = {
        "delegate": "function Create() { return {delegate: {assistant_id: 'expert'}}; }\n",
        "ctx.call": ("async function Create(ctx, messages) {\n"
                     "  const got = await ctx.call('expert', [{role: 'user', content: 'help'}]);\n"
                     "  return {messages: [...messages, {role: 'system', content: 'Expert: ' + got.content}]};\n}\n"),
    }  # fmt: skip
    more = {
        "hooks/front.js": hooks[how],
        "assistants/front/assistant.yml": "name: Front\nhook: hooks/front.js\n",
        "assistants/expert/assistant.yml": "name: Expert\n",
    }
    rt = runtime(tmp_path, store, fake, more)
    try:
        fake.enqueue(Reply(text="From the expert.", usage=used(100, 50)))
        if how == "ctx.call":
            fake.enqueue(Reply(text="From the front.", usage=used(200, 20)))
        end = end_of(await turn(rt, "question", assistant="front"))
        assert end.status == "completed"
        rows = await ledger_rows(rt)
        assert [r[0] for r in rows] == (["expert"] if how == "delegate" else ["expert", "front"])
        tokens_in = sum(r[2] for r in rows)
        tokens_out = sum(r[3] for r in rows)
        assert (end.usage["input_tokens"], end.usage["output_tokens"], end.usage["calls"]) == (
            tokens_in,
            tokens_out,
            len(rows),
        )
        assert end.usage["cost_usd"] == pytest.approx(sum(r[4] for r in rows))
    finally:
        await rt.engines.aclose()
        await rt.hooks.aclose()


async def test_a_user_named_like_a_member_of_a_team_has_a_scope_of_their_own(store: SqlStore) -> None:
    """Ids may hold `@`: the user `bob@acme` (no team) is not bob of team acme, for budgets and rate limits."""
    loner, member = Identity("bob@acme"), Identity("bob", "acme")
    assert scope_of(loner, "user") != scope_of(member, "user")
    await store.set_ceilings(scope_of(loner, "user"), {"per_day": 1.0})
    assert await store.own_budgets(member, ["user"]) == {"user": Own()}
    assert await store.own_budgets(loner, ["user"]) == {"user": Own(ceilings={"per_day": 1.0})}
    assert shown(scope_of(member, "user")[1]) == "bob@acme"  # as people read it


async def test_a_message_says_which_link_of_a_fallback_chain_answered(
    tmp_path: Path, store: SqlStore, fake: ScriptedModel
) -> None:
    files = app_files(fake.base_url)
    files["app.yml"] = files["app.yml"].replace("default: fake.model", "default: [fake.down, fake.model]")
    files["connectors/fake/down.yml"] = files["connectors/fake/model.yml"].replace("model: text", "model: down")
    rt = make_runtime(tmp_path / "app", store, files, model=fake)
    try:
        fake.enqueue(Reply(status=503, error_message="overloaded"), model="down")  # the first link fails
        fake.enqueue(Reply(text="Here."), model="text")
        end = end_of(await turn(rt, "hello"))
        assert end.status == "completed"
        [answer] = [m for m in await rt.store.history(ALICE, "c1") if m.role == "assistant"]
        assert (answer.connector, answer.model) == ("fake.model", "text")
        assert answer.to_api().get("connector") == "fake.model" and answer.to_api().get("model") == "text"
        [user] = [m.to_api() for m in await rt.store.history(ALICE, "c1") if m.role == "user"]
        assert "connector" not in user
    finally:
        await rt.engines.aclose()
