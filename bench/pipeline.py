"""A plain run through our pipeline (one model call, stored) beside the same call made directly.

    .venv/bin/python bench/pipeline.py [--runs 100]

Pairs, alternating run by run (A B A B …), medians reported:
  * pipeline, openai engine   vs  one streaming call with the `openai` SDK
  * pipeline, litellm engine  vs  one streaming call with litellm
The fake provider runs in its own process and streams 20 chunks; the store is a SQLite file.
CPU is this process's `time.process_time`; wall time is shown beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import litellm  # noqa: E402
import openai  # noqa: E402

from bench.engines import MESSAGES, MODEL, start_fake  # noqa: E402
from yao_agent.identity import Identity  # noqa: E402
from yao_agent.pipeline import RunRequest, Runtime, run_stream  # noqa: E402

APP = {
    "app.yml": "roles:\n  default: bench.openai\n",
    "connectors/bench/openai.yml": "type: openai\nmodel: {model}\nbase_url: {url}\napi_key: x\nengine: openai\n",
    "connectors/bench/litellm.yml": "type: openai\nmodel: {model}\nbase_url: {url}\napi_key: x\nengine: litellm\n",
    "assistants/plain/assistant.yml": "name: Plain\nconnector: bench.openai\n",
    "assistants/plain_litellm/assistant.yml": "name: Plain litellm\nconnector: bench.litellm\n",
}


def write_app(root: Path, url: str) -> Path:
    for rel, text in APP.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.format(model=MODEL, url=url))
    return root


async def sample(call: Callable[[], Awaitable[None]]) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    await call()
    return time.process_time() - cpu, time.perf_counter() - wall


async def bench(url: str, runs: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        rt = await Runtime.open(write_app(Path(tmp), url), db=f"sqlite:///{tmp}/agent.db")
        client = openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=0)
        who = Identity("bench")

        def ours(assistant: str) -> Callable[[], Awaitable[None]]:
            async def call() -> None:
                request = RunRequest(assistant, who, MESSAGES)
                async for event in run_stream(rt, request):
                    if event.type == "stream_end":
                        assert event.status == "completed", event

            return call

        async def raw_openai() -> None:
            stream = await client.chat.completions.create(
                model=MODEL,
                messages=MESSAGES,
                stream=True,
                stream_options={"include_usage": True},  # type: ignore[arg-type]
            )
            async for _ in stream:
                pass

        async def raw_litellm() -> None:
            stream = await litellm.acompletion(
                model=f"openai/{MODEL}", api_base=url, api_key="x", messages=MESSAGES, stream=True,
                stream_options={"include_usage": True}, max_retries=0,
            )  # fmt: skip
            async for _ in stream:  # type: ignore[union-attr]
                pass

        pairs = {
            "openai engine": (ours("plain"), raw_openai),
            "litellm engine": (ours("plain_litellm"), raw_litellm),
        }
        for name, (a, b) in pairs.items():
            for _ in range(10):
                await a()
                await b()
            mine: list[tuple[float, float]] = []
            base: list[tuple[float, float]] = []
            for _ in range(runs):
                mine.append(await sample(a))
                base.append(await sample(b))
            report(name, mine, base)
        await client.close()
        await rt.aclose()


def report(name: str, mine: list[tuple[float, float]], base: list[tuple[float, float]]) -> None:
    cpu_a, cpu_b = (statistics.median(s[0] for s in x) * 1000 for x in (mine, base))
    wall_a, wall_b = (statistics.median(s[1] for s in x) * 1000 for x in (mine, base))
    print(f"\nplain run, {name} ({len(mine)} runs each, alternating; medians)")
    print(f"{'':<22} {'CPU ms':>8} {'wall ms':>8}")
    print(f"{'our pipeline (stored)':<22} {cpu_a:>8.2f} {wall_a:>8.2f}")
    print(f"{'direct call':<22} {cpu_b:>8.2f} {wall_b:>8.2f}")
    print(f"{'ratio':<22} {cpu_a / cpu_b:>7.2f}× {wall_a / wall_b:>7.2f}×")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=100)
    args = parser.parse_args()
    process, url = start_fake()
    try:
        asyncio.run(bench(url, args.runs))
    finally:
        process.terminate()
        process.wait(10)


if __name__ == "__main__":
    main()
