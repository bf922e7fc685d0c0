"""A replay's set-up: the changed app on a scratch store of its own, its tools answered from the stored runs,
and the turns chosen from the deployment's store (which is only read)."""

from __future__ import annotations

import random
import re
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import URL

from yao_agent.dsl import App, load_app
from yao_agent.dsl.specs import ROLE_PREFIX
from yao_agent.errors import UsageError
from yao_agent.evals.judge import pairwise_for
from yao_agent.evals.replay import Replayed, replay
from yao_agent.evals.replay_tools import ReplayTools
from yao_agent.identity import OPERATOR, Identity
from yao_agent.pipeline.runtime import Runtime
from yao_agent.service.runs import Runs
from yao_agent.store import SqlStore, open_engine, store_url
from yao_agent.store.audit import span

_AGO = re.compile(r"(\d+)([mhd])")
_UNIT_S = {"m": 60, "h": 3600, "d": 86_400}
JUDGE_USER = "eval"  # the pairwise judge is called as this user: its role settings pick the judge's connector


@dataclass(frozen=True, slots=True)
class Choice:
    """Which stored turns to replay: the latest `limit` completed ones, narrowed by assistant, team, age."""

    assistant: str | None = None
    team: str | None = None
    since: float | None = None  # epoch seconds
    limit: int = 50


@dataclass(frozen=True, slots=True)
class Plan:
    against: Path  # the changed app's folder
    into: str | None = None  # where the new runs are stored (default: a temporary SQLite file, then removed)
    judge: str | None = None  # a connector or `use::role` of the changed app, for pairwise verdicts
    seed: int | None = None  # the order the judge sees the two answers in
    concurrency: int = 4
    environ: Mapping[str, str] | None = None


def since_of(given: str, now: float) -> float:
    """`--since`: an age (`30m`, `24h`, `7d`) or a day (YYYY-MM-DD) or moment (ISO 8601)."""
    ago = _AGO.fullmatch(given.strip())
    if ago is not None:
        return now - int(ago.group(1)) * _UNIT_S[ago.group(2)]
    try:
        return span(given, None)[0]
    except UsageError:
        raise UsageError(f"--since: expected an age (30m, 24h, 7d), a day (YYYY-MM-DD) or a moment (ISO 8601), "
                         f"got {given[:40]!r}") from None  # fmt: skip


async def replay_stored(source: SqlStore, choice: Choice, plan: Plan) -> list[Replayed]:
    """The chosen turns of `source`, replayed on the app at `plan.against`."""
    app = load_app(plan.against)  # a broken app is refused (SpecError) before anything is read
    if plan.into is not None and _same_store(store_url(plan.into, app.root), source.db.engine.url):
        raise UsageError("--into: that is the store the turns are read from; a replay only reads it (expected "
                         "another store, or none: a scratch one)")  # fmt: skip
    if plan.judge is not None:
        _check_judge(app, plan.judge)
    turns = await source.stored_turns(OPERATOR, assistant=choice.assistant, team=choice.team, since=choice.since,
                                      limit=choice.limit)  # fmt: skip
    if not turns:
        return []
    listed = await source.tool_catalogs()
    with tempfile.TemporaryDirectory(prefix="yao-agent-replay-") as scratch:
        url = plan.into or f"sqlite:///{Path(scratch) / 'replay.db'}"
        store = SqlStore(await open_engine(store_url(url, app.root)))
        rt = Runtime(app=app, store=store, tools=ReplayTools(app.mcps, listed), environ=plan.environ)
        runs = Runs(rt)
        try:
            for setting in await source.list_roles(OPERATOR):  # each user's roles pick what they picked
                await store.set_role((setting.scope_kind, setting.scope_id), setting.role, setting.connectors)
            rng = random.Random(plan.seed if plan.seed is not None else time.time_ns())
            compare = pairwise_for(rt, plan.judge, Identity(JUDGE_USER), rng) if plan.judge else None
            return await replay(runs.run, turns, compare=compare, concurrency=plan.concurrency)
        finally:
            await runs.aclose()


def _check_judge(app: App, ref: str) -> None:
    """`--judge` names a connector or a role of the changed app (else every verdict would say it failed)."""
    role = ref.removeprefix(ROLE_PREFIX) if ref.startswith(ROLE_PREFIX) else None
    if role is None and ref not in app.connectors:
        known = ", ".join(sorted(app.connectors)) or "none"
        raise UsageError(f"--judge: no connector '{ref}' in {app.root} (known: {known}; or use::<role>)")
    if role is not None and role not in app.config.roles:
        known = ", ".join(sorted(app.config.roles)) or "none"
        raise UsageError(f"--judge: no role '{role}' in {app.root}/app.yml (known: {known})")


def _same_store(one: URL, other: URL) -> bool:
    """Whether two URLs name the same database (whatever driver each names)."""

    def place(url: URL) -> tuple[str, str | None, int | None, str | None]:
        return url.get_backend_name(), url.host, url.port, url.database

    return place(one) == place(other)
