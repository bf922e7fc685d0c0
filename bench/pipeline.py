"""Runs through our pipeline beside the same model (and tool) calls made directly, per engine.

    .venv/bin/python bench/pipeline.py [--runs 100] [--engine litellm] [--earlier-tree DIR]

A plain run: one model call streaming 20 chunks, stored. A tool run: the model calls a tool (its
arguments in 20 pieces), the tool runs on an in-process MCP server, the model answers in 20 chunks,
all stored. The baselines make the same calls with the `openai` SDK (or litellm) and the `mcp`
client, storing nothing. The fake provider runs in its own process; a SQLite file holds the store.
The ways alternate run by run, every other round in reverse order, as many tool runs as plain ones;
medians of this process's CPU time, wall time beside it, and the quartiles of the ratio taken round by
round (how far the verdict can be trusted).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import logging
import sys
import tempfile
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import bench  # noqa: F401  (before litellm: it puts litellm offline)

# isort: split
import litellm
import openai
from mcp import Client
from mcp.server.mcpserver import MCPServer

from bench.common import (
    MODEL,
    PLAIN,
    Row,
    Sample,
    alternate,
    fake_provider,
    median_ms,
    paired_ratios,
    print_table,
    write_app,
)
from yao_agent.connectors import Engine, Engines, ModelRequest, stream_call
from yao_agent.identity import Identity
from yao_agent.pipeline import RunRequest, Runtime
from yao_agent.service.runs import Runs
from yao_agent.tools import ToolManager

server = MCPServer("bench")
logging.getLogger().setLevel(logging.WARNING)  # building an MCPServer turns INFO logging on for everything


@server.tool()
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


CONNECTOR = "type: openai\nmodel: {model}\nbase_url: {url}\napi_key: x\nengine: {engine}\n"
APP = {
    "app.yml": "roles:\n  default: bench.openai\n",
    "connectors/bench/openai.yml": CONNECTOR.replace("{engine}", "openai"),
    "connectors/bench/litellm.yml": CONNECTOR.replace("{engine}", "litellm"),
    "mcps/bench.yml": "command: python\n",
    "assistants/plain_openai/assistant.yml": "name: Plain\nconnector: bench.openai\n",
    "assistants/plain_litellm/assistant.yml": "name: Plain\nconnector: bench.litellm\n",
    "assistants/tool_openai/assistant.yml": "name: Tooled\nconnector: bench.openai\nmcp: {{servers: [bench]}}\n",
    "assistants/tool_litellm/assistant.yml": "name: Tooled\nconnector: bench.litellm\nmcp: {{servers: [bench]}}\n",
}
ASK = [{"role": "user", "content": "Look up the key 'alpha'."}]
CALL = {"name": "bench__lookup", "arguments": {"key": "alpha"}, "id": "call_1"}
TARGETS = {"openai": (1.30, 1.35), "litellm": (1.10, 1.10)}  # plain run, tool run


def script_tool_run(url: str) -> Callable[[], None]:
    """Before each tool run (not measured): its two replies, a tool call in 20 pieces, then the answer."""
    replies = [{"tool_calls": [CALL], "chunk_size": 1}, {"text": "The value is: value of alpha. " * 2, "chunk_size": 3}]
    body = json.dumps({"replies": replies}).encode()
    request = urllib.request.Request(
        url.removesuffix("/v1") + "/_fake/enqueue", body, {"Content-Type": "application/json"}
    )
    return lambda: urllib.request.urlopen(request).read() and None


class Direct:
    """The baselines: the same calls made straight with one library, nothing stored."""

    def __init__(self, engine: str, url: str, mcp: Client, tools: list[dict[str, Any]]) -> None:
        self.engine, self.url, self.mcp, self.tools = engine, url, mcp, tools
        self.client = openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=0)

    async def stream(self, messages: list[dict[str, Any]], **extra: Any) -> list[Any]:
        common: dict[str, Any] = {"messages": messages, "stream": True, "stream_options": {"include_usage": True}}
        if self.engine == "openai":
            chunks: Any = await self.client.chat.completions.create(model=MODEL, **common, **extra)
        else:
            chunks = await litellm.acompletion(model=f"openai/{MODEL}", api_base=self.url, api_key="x", max_retries=0,
                                               **common, **extra)  # fmt: skip
        return [chunk async for chunk in chunks]

    async def plain(self) -> None:
        await self.stream(PLAIN)

    async def tool_run(self) -> None:
        chunks = await self.stream(ASK, tools=self.tools)
        deltas = [c.choices[0].delta for c in chunks if c.choices]
        arguments = "".join(d.tool_calls[0].function.arguments or "" for d in deltas if d.tool_calls)
        result = await self.mcp.call_tool("lookup", json.loads(arguments))
        function = {"name": "bench__lookup", "arguments": arguments}
        called = {"role": "assistant", "tool_calls": [{"id": "call_1", "type": "function", "function": function}]}
        answered = {"role": "tool", "tool_call_id": "call_1", "content": str(result.content[0].text)}  # type: ignore[union-attr]
        await self.stream([*ASK, called, answered], tools=self.tools)  # as ours: the model may call again


Way = Callable[[], Awaitable[None]]


async def plain_two_ways(url: str, runs: int, ways: Callable[[Way], dict[str, Way]]) -> dict[str, list[Sample]]:
    """A plain run (openai engine, SQLite) measured in each of the `ways` made from it, alternated: what
    switching one thing on (metrics, traces, JSON logs) costs a run."""
    with tempfile.TemporaryDirectory() as tmp:
        service = await Runs.open(write_app(Path(tmp), APP, url=url, model=MODEL), db=f"sqlite:///{tmp}/agent.db")
        try:
            return await alternate(ways(ours(service, "plain_openai", PLAIN)), runs, warmup=20)
        finally:
            await service.aclose()


def ours(runs: Runs, assistant: str, messages: list[dict[str, Any]]) -> Callable[[], Awaitable[None]]:
    who = Identity("bench")

    async def call() -> None:
        async for event in runs.stream(RunRequest(assistant, who, messages)):
            if event.type == "stream_end" and event.status != "completed":
                raise SystemExit(f"{assistant}: the run ended {event.status} ({event.reason}): {event.error}")

    return call


async def measure(
    url: str, runs: int, engines: tuple[str, ...] = ("openai", "litellm"), earlier: Path | None = None
) -> list[Row]:
    """The rows of each engine; with `earlier` (another checkout), its litellm engine's runs alternate too."""
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryDirectory() as tmp_earlier:
        service = await _service(url, Path(tmp))
        then = await _service(url, Path(tmp_earlier), Engines({"litellm": _engine_from(earlier)})) if earlier else None
        rt = service.rt
        tools = [t.to_openai() for t in await rt.tools.tools_for(rt.app.assistants["tool_openai"].mcp.servers)]
        async with Client(server) as mcp:
            for engine in engines:
                direct = Direct(engine, url, mcp, tools)
                mine = {"ours": service, **({"earlier": then} if then and engine == "litellm" else {})}
                plain = await alternate({**{k: ours(s, f"plain_{engine}", PLAIN) for k, s in mine.items()},
                                         "direct": direct.plain, "engine": engine_call(rt, engine)},
                                        runs, mirror=True)  # fmt: skip
                tooled = await alternate({**{k: ours(s, f"tool_{engine}", ASK) for k, s in mine.items()},
                                          "direct": direct.tool_run},
                                         runs, before=script_tool_run(url), mirror=True)  # fmt: skip
                await direct.client.close()
                rows += _rows(engine, plain, tooled)
                rows += _earlier_rows(earlier, plain, tooled) if "earlier" in mine else []
        for each in (service, then):
            if each is not None:
                await each.aclose()
    return rows


async def _service(url: str, root: Path, engines: Engines | None = None) -> Runs:
    """The bench app in `root`, its tools in process; its engines replaced by `engines` if given."""
    service = await Runs.open(write_app(root, APP, url=url, model=MODEL), db=f"sqlite:///{root}/agent.db")
    rt = service.rt
    if engines is not None:
        rt.engines = engines
    rt.tools = ToolManager(rt.app.mcps, root=rt.app.root, in_process={"bench": server})
    return service


def _engine_from(tree: Path) -> Engine:
    """The litellm engine of another checkout (its module run against this one's package), to measure a
    change beside what it changed, round by round."""
    path = tree / "yao_agent" / "connectors" / "litellm_engine.py"
    spec = importlib.util.spec_from_file_location("earlier_litellm_engine", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"no litellm engine at {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return cast(Engine, module.LiteLLMEngine())


def engine_call(rt: Runtime, engine: str) -> Callable[[], Awaitable[None]]:
    """One model call through our engine alone, outside any run."""
    chain = (rt.app.connectors[f"bench.{engine}"],)

    async def call() -> None:
        async for _ in stream_call(chain, ModelRequest(messages=PLAIN), engines=rt.engines):
            pass

    return call


def _rows(engine: str, plain: dict[str, list[Any]], tooled: dict[str, list[Any]]) -> list[Row]:
    plain_limit, tool_limit = TARGETS[engine]
    p_ours, p_base, call = median_ms(plain["ours"]), median_ms(plain["direct"]), median_ms(plain["engine"])
    t_ours, t_base = median_ms(tooled["ours"]), median_ms(tooled["direct"])
    wall = [median_ms(x[k], 1) for x in (plain, tooled) for k in ("ours", "direct")]
    # A tool run is a plain run's fixed cost, two model calls, the MCP call, and the tool round's own
    # work; the gap between the runs, less the gap between one call through our engine and one made
    # directly, leaves that last part.
    round_cost = (t_ours - t_base) - (p_ours - p_base) + (p_base - call)
    plain_note = (
        f"wall {wall[0]:.2f} ms vs {wall[1]:.2f} ms; {paired_ratios(plain['ours'], plain['direct'])}; "
        f"the call alone through our engine {call:.2f} ms ({call / p_base:.2f}×)"
    )
    tool_note = (
        f"wall {wall[2]:.2f} ms vs {wall[3]:.2f} ms; {paired_ratios(tooled['ours'], tooled['direct'])}; "
        f"the tool round itself adds {round_cost:.2f} ms CPU of ours"
    )
    return [
        Row(f"plain run, {engine} engine (CPU)", p_ours, "ms", "ratio", plain_limit, p_base, note=plain_note),
        Row(f"run with one tool round, {engine} engine (CPU)", t_ours, "ms", "ratio", tool_limit, t_base,
            note=tool_note),
    ]  # fmt: skip


def _earlier_rows(tree: Path | None, plain: dict[str, list[Any]], tooled: dict[str, list[Any]]) -> list[Row]:
    """The runs of the other checkout's litellm engine, against the same direct calls."""
    limits = TARGETS["litellm"]
    return [
        Row(f"{what}, litellm engine as in {tree} (CPU)", median_ms(x["earlier"]), "ms", "ratio", limit,
            median_ms(x["direct"]), note=paired_ratios(x["earlier"], x["direct"]))
        for what, x, limit in (("plain run", plain, limits[0]), ("run with one tool round", tooled, limits[1]))
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--engine", choices=["openai", "litellm"], action="append")
    parser.add_argument("--earlier-tree", type=Path, help="another checkout: its litellm engine measured beside ours")
    args = parser.parse_args()
    with fake_provider() as url:
        engines = tuple(args.engine or ("openai", "litellm"))
        print_table(asyncio.run(measure(url, args.runs, engines, args.earlier_tree)))


if __name__ == "__main__":
    main()
