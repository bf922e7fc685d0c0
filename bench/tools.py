"""A run with one tool round through our pipeline, beside the same calls made directly.

    .venv/bin/python bench/tools.py [--runs 60]

Ours: one stored run of an assistant with an in-process MCP server — model call (a tool call), the
tool, model call (the answer) — openai engine, SQLite store. Direct: the same two streaming calls
with the `openai` SDK and the same tool call with the `mcp` client, nothing stored. Alternating
A B A B, medians; the fake provider runs in its own process and is scripted over its HTTP control API
before each run (outside the measured time). The difference is what one tool round costs in our code.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import openai  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.server.mcpserver import MCPServer  # noqa: E402

from bench.engines import start_fake  # noqa: E402
from yao_agent.identity import Identity  # noqa: E402
from yao_agent.pipeline import RunRequest, Runtime, run_stream  # noqa: E402
from yao_agent.tools import ToolManager  # noqa: E402

server = MCPServer("bench")
logging.getLogger().setLevel(logging.WARNING)  # building an MCPServer turns INFO logging on for everything


@server.tool()
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


APP = {
    "app.yml": "roles:\n  default: bench.openai\n",
    "connectors/bench/openai.yml": "type: openai\nmodel: bench\nbase_url: {url}\napi_key: x\nengine: openai\n",
    "mcps/bench.yml": "command: python\n",
    "assistants/tooled/assistant.yml": "name: Tooled\nmcp: {{servers: [bench]}}\n",
}
MESSAGES = [{"role": "user", "content": "Look up the key 'alpha'."}]
CALL = {"name": "bench__lookup", "arguments": {"key": "alpha"}, "id": "call_1"}


def script(url: str) -> None:
    """The next two model calls: a tool call in 20 pieces, then a 20-chunk answer."""
    replies = [{"tool_calls": [CALL], "chunk_size": 1}, {"text": "The value is: value of alpha. " * 2, "chunk_size": 3}]
    body = json.dumps({"replies": replies}).encode()
    control = url.removesuffix("/v1") + "/_fake/enqueue"
    urllib.request.urlopen(urllib.request.Request(control, body, {"Content-Type": "application/json"})).read()


async def measure(url: str, call: Callable[[], Awaitable[None]]) -> tuple[float, float]:
    script(url)
    cpu, wall = time.process_time(), time.perf_counter()
    await call()
    return time.process_time() - cpu, time.perf_counter() - wall


async def bench(url: str, runs: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for rel, text in APP.items():
            (Path(tmp) / rel).parent.mkdir(parents=True, exist_ok=True)
            (Path(tmp) / rel).write_text(text.format(url=url))
        rt = await Runtime.open(tmp, db=f"sqlite:///{tmp}/agent.db")
        rt.tools = ToolManager(rt.app.mcps, root=rt.app.root, in_process={"bench": server})
        client = openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=0)
        tools = [t.to_openai() for t in await rt.tools.tools_for(rt.app.assistants["tooled"].mcp.servers)]
        who = Identity("bench")
        async with Client(server) as mcp_client:

            async def ours() -> None:
                async for event in run_stream(rt, RunRequest("tooled", who, MESSAGES)):
                    if event.type == "stream_end":
                        assert event.status == "completed", event

            async def stream(messages: list[dict[str, object]], **extra: object) -> list[object]:
                chunks = await client.chat.completions.create(
                    model="bench",
                    messages=messages,
                    stream=True,
                    stream_options={"include_usage": True},
                    **extra,  # type: ignore[arg-type]
                )
                return [chunk async for chunk in chunks]

            async def direct() -> None:
                chunks = await stream(MESSAGES, tools=tools)
                deltas = [c.choices[0].delta for c in chunks if c.choices]  # type: ignore[attr-defined]
                arguments = "".join(d.tool_calls[0].function.arguments or "" for d in deltas if d.tool_calls)
                result = await mcp_client.call_tool("lookup", json.loads(arguments))
                function = {"name": "bench__lookup", "arguments": arguments}
                called = {
                    "role": "assistant",
                    "tool_calls": [{"id": "call_1", "type": "function", "function": function}],
                }
                answered = {"role": "tool", "tool_call_id": "call_1", "content": str(result.content[0].text)}  # type: ignore[union-attr]
                await stream([*MESSAGES, called, answered])

            for _ in range(5):
                await measure(url, ours)
                await measure(url, direct)
            mine, base = [], []
            for _ in range(runs):
                mine.append(await measure(url, ours))
                base.append(await measure(url, direct))
        await client.close()
        await rt.aclose()
    cpu = [statistics.median(s[0] for s in x) * 1000 for x in (mine, base)]
    wall = [statistics.median(s[1] for s in x) * 1000 for x in (mine, base)]
    print(f"\nrun with one tool round ({runs} runs each, alternating; medians)")
    print(f"{'':<26} {'CPU ms':>8} {'wall ms':>8}")
    print(f"{'our pipeline (stored)':<26} {cpu[0]:>8.2f} {wall[0]:>8.2f}")
    print(f"{'direct openai + mcp':<26} {cpu[1]:>8.2f} {wall[1]:>8.2f}")
    print(f"{'ratio':<26} {cpu[0] / cpu[1]:>7.2f}× {wall[0] / wall[1]:>7.2f}×")
    print(f"{'our overhead per run':<26} {cpu[0] - cpu[1]:>8.2f} {wall[0] - wall[1]:>8.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=60)
    args = parser.parse_args()
    process, url = start_fake()
    try:
        asyncio.run(bench(url, args.runs))
    finally:
        process.terminate()
        process.wait(10)


if __name__ == "__main__":
    main()
