"""Budgets and rate limits: an app whose `budgets` and `limits` a test sets, on a store and runtimes sharing
one clock the test moves, and who runs in it. Every connector is priced at $0.01 a token, in and out."""

from __future__ import annotations

from pathlib import Path

from tests.support.apps import make_app
from tests.support.clock import Clock
from tests.support.runtimes import app_files, no_sleep
from yao_agent.connectors import RetryPolicy
from yao_agent.dsl import load_app
from yao_agent.identity import Identity
from yao_agent.ids import CountingIds, IdSource
from yao_agent.pipeline import RunRequest, Runtime
from yao_agent.store import SqlStore
from yao_agent.testing import ModelDouble, ScriptedModel

BOB, CAROL = Identity("bob", "acme"), Identity("carol", "acme")
DAVE = Identity("dave", "beta")  # another team
PRICE = "pricing: {input_per_mtok: 10000, output_per_mtok: 10000}\n"  # $0.01 a token
LIMITS = "{max_turns: 10, timeout_s: 30%s}"  # app_files' limits, with a test's own


class Quota:
    """An app whose `app.yml` says `budgets` and `limits` as a test wants them, run on the test's store."""

    def __init__(
        self, tmp_path: Path, store: SqlStore, fake: ScriptedModel, clock: Clock, model: ModelDouble | None = None
    ) -> None:
        """`model`: what answers the runtimes' calls, when not `fake`."""
        self.tmp_path, self.store, self.fake, self.clock = tmp_path, store, fake, clock
        self.model: ModelDouble = model or fake
        self.made: list[Runtime] = []

    def runtime(
        self, *, budgets: str = "{}", limits: str = LIMITS % "", store: SqlStore | None = None,
        ids: IdSource | None = None, more: dict[str, str] | None = None, connector: str = "",
    ) -> Runtime:  # fmt: skip
        """`more`: files added to the app; `connector`: lines added to `fake.model`'s."""
        root = self.tmp_path / f"app{len(self.made)}"
        files = app_files(self.model.base_url, limits=limits) | (more or {})
        files["app.yml"] += f"budgets: {budgets}\n"
        files["connectors/fake/model.yml"] += PRICE + connector
        rt = Runtime(app=load_app(make_app(root, files, base={})), store=store or self.store,
                     engines=self.model.engines(), ids=ids or CountingIds(), sleep=no_sleep,
                     retry=RetryPolicy(max_attempts=1), clock=self.clock)  # fmt: skip
        self.made.append(rt)
        return rt


def hello(who: Identity, chat_id: str) -> RunRequest:
    return RunRequest("chat", who, [{"role": "user", "content": "Hello."}], chat_id=chat_id)
