"""`yao-agent eval replay` of stored turns beside the same turns run live.

    .venv/bin/python bench/replay.py [--runs 50]

The turns are made live first: every other one a tool run (the model calls a tool, the tool runs on an
in-process MCP server, the model answers), the others plain; each model reply streams 20 chunks from
the fake provider in its own process, and a SQLite file stores them. Then they are replayed on a copy of
the app whose prompt changed: the same replies, every tool result from the store, the new runs in a
scratch store, one turn at a time (so the fake's queue answers them in order). Our CPU per turn (this
process's: the fake's is its own) live and replayed, and the replay's wall time for all of them.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import bench  # noqa: F401  (before litellm: it puts litellm offline)

# isort: split
from bench.common import MODEL, Row, runs_main, write_app
from bench.pipeline import server
from yao_agent.evals.against import Choice, Plan, replay_stored
from yao_agent.identity import Identity
from yao_agent.pipeline import RunRequest
from yao_agent.service.runs import Runs
from yao_agent.store import SqlStore, open_engine, store_url
from yao_agent.tools import ToolManager, ToolSpec
from yao_agent.tools.catalog import stored

APP = {
    "app.yml": "roles:\n  default: bench.openai\n",
    "connectors/bench/openai.yml": "type: openai\nmodel: {model}\nbase_url: {url}\napi_key: x\n",
    "mcps/bench.yml": "command: python\n",
    "assistants/helper/assistant.yml": (
        "name: Helper\nprompts:\n  - {{role: system, content: '{prompt}'}}\nmcp: {{servers: [bench]}}\n"
    ),
}
CALL = {"name": "bench__lookup", "arguments": {"key": "alpha"}, "id": "call_1"}
TOOL_TURN = [{"tool_calls": [CALL], "chunk_size": 1}, {"text": "The value is: value of alpha. " * 2, "chunk_size": 3}]
PLAIN_TURN = [{"text": "Twenty chunks of a plain answer, " * 4, "chunk_size": 7}]
WALL_S = 10.0  # the replay of 50 turns, at most (issue 31 asks how long; a CI gate should take seconds)
ADDED_CPU_MS = 5.0  # what a replayed turn may cost us beyond the same turn run live


def enqueue(url: str, replies: Sequence[dict[str, Any]]) -> None:
    body = json.dumps({"replies": list(replies)}).encode()
    request = urllib.request.Request(url.removesuffix("/v1") + "/_fake/enqueue", body,
                                     {"Content-Type": "application/json"})  # fmt: skip
    urllib.request.urlopen(request).read()


def turn_replies(n: int) -> list[dict[str, Any]]:
    return TOOL_TURN if n % 2 == 0 else PLAIN_TURN


async def live(runs: Runs, url: str, count: int) -> float:
    """Run `count` turns live, one after another (each its own chat and user): our CPU seconds in all."""
    cpu = time.process_time()
    for n in range(count):
        enqueue(url, turn_replies(n))
        asked = [{"role": "user", "content": f"Look up the key 'alpha', please ({n})."}]
        result = await runs.run(RunRequest("helper", Identity(f"user-{n}", "acme"), asked))
        assert result.status == "completed", result.error
    return time.process_time() - cpu


async def measure(url: str, runs: int) -> list[Row]:
    with tempfile.TemporaryDirectory() as tmp:
        app = write_app(Path(tmp) / "app", APP, url=url, model=MODEL, prompt="You are Helper.")
        changed = write_app(Path(tmp) / "changed", APP, url=url, model=MODEL, prompt="You are Helper. Be brief.")
        service = await Runs.open(app, db=f"sqlite:///{tmp}/deployment.db")
        rt = service.rt

        async def keep(server_id: str, tools: Sequence[ToolSpec]) -> None:
            await rt.store.save_tool_catalog(server_id, [stored(t) for t in tools])

        rt.tools = ToolManager(rt.app.mcps, root=rt.app.root, in_process={"bench": server}, on_listed=keep)
        await live(service, url, 4)  # warm: engines, the server's start and listing, the store's statements
        live_cpu = await live(service, url, runs)
        await service.aclose()
        for n in reversed(range(runs)):  # the replay takes the newest turn first
            enqueue(url, turn_replies(n))
        source = SqlStore(await open_engine(store_url(f"sqlite:///{tmp}/deployment.db", app)))
        cpu, wall = time.process_time(), time.perf_counter()
        replayed = await replay_stored(source, Choice(limit=runs), Plan(changed, concurrency=1))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        await source.aclose()
    outcomes = {r.outcome for r in replayed}
    assert len(replayed) == runs and outcomes == {"unchanged"}, outcomes
    per_live, per_replay = live_cpu / runs * 1000, cpu / runs * 1000
    return [
        Row(f"eval replay of {runs} stored turns (half with a tool call), wall", wall, "s", "max", WALL_S,
            note="one at a time; the model over HTTP, tool results from the store, a scratch store set up"),
        Row("eval replay: our CPU per turn, beside the turn run live", per_replay, "ms", "added", ADDED_CPU_MS,
            baseline=per_live, note="replayed: the store read, scratch store and its migration shared out"),
    ]  # fmt: skip


if __name__ == "__main__":
    runs_main(__doc__, measure)
