"""CPU per streamed model call, each engine beside the raw library it wraps, and the cost of a resolution.

    .venv/bin/python bench/engines.py [--calls 100]      (in the table: python -m bench --only engines)

The fake provider runs in its own process (so its work is not counted); each call streams a
20-chunk reply. The four ways alternate call by call, every other round in reverse order, so machine
noise and what a call leaves behind fall on all alike; medians are reported. CPU is this process's
`time.process_time`, counted until the call's background work (litellm's logging) has settled, the
steadier figure on a shared machine; wall time is shown beside it.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import bench  # noqa: F401  (before litellm: it puts litellm offline)

# isort: split
import litellm
import openai

from bench.common import MODEL, PLAIN, Row, alternate, fake_provider, median_ms, paired_ratios, print_table
from yao_agent.connectors import Engines, ModelRequest, stream_call
from yao_agent.connectors.resolve import resolve_connectors
from yao_agent.dsl import load_app
from yao_agent.dsl.envvars import EnvValue
from yao_agent.dsl.specs import ConnectorSpec
from yao_agent.identity import Identity
from yao_agent.store import SqlStore, open_engine, store_url

TARGETS = {"openai": 1.30, "litellm": 1.10}  # as a plain run's (bench/pipeline.py): a call is most of one


def connector(base_url: str, engine: str) -> ConnectorSpec:
    return ConnectorSpec(
        id=f"bench.{engine}", type="openai", file="bench", model=MODEL,
        api_key=EnvValue("x", "bench"), base_url=EnvValue(base_url, "bench"), engine=engine,  # type: ignore[arg-type]
    )  # fmt: skip


async def measure(base_url: str, calls: int) -> list[Row]:
    client = openai.AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0)
    engines = Engines()
    ours = {name: connector(base_url, name) for name in ("openai", "litellm")}

    async def raw_openai() -> int:
        stream = await client.chat.completions.create(
            model=MODEL,
            messages=PLAIN,
            stream=True,
            stream_options={"include_usage": True},  # type: ignore[arg-type]
        )
        return sum([1 async for _ in stream])

    async def raw_litellm() -> int:
        stream = await litellm.acompletion(
            model=f"openai/{MODEL}", api_base=base_url, api_key="x", messages=PLAIN, stream=True,
            stream_options={"include_usage": True}, max_retries=0,
        )  # fmt: skip
        return sum([1 async for _ in stream])  # type: ignore[union-attr]

    def our(engine: str) -> Callable[[], Awaitable[int]]:
        async def call() -> int:
            request = ModelRequest(messages=PLAIN)
            return sum([1 async for _ in stream_call([ours[engine]], request, engines=engines)])

        return call

    ways = {"openai (raw)": raw_openai, "openai": our("openai"),
            "litellm (raw)": raw_litellm, "litellm": our("litellm")}  # fmt: skip
    samples = await alternate(ways, calls, mirror=True)
    await engines.aclose()
    await client.close()
    rows: list[Row] = []
    for engine, limit in TARGETS.items():
        mine, raw = samples[engine], samples[f"{engine} (raw)"]
        note = f"wall {median_ms(mine, 1):.2f} ms vs {median_ms(raw, 1):.2f} ms; {paired_ratios(mine, raw)}"
        rows.append(Row(f"a streamed call alone, {engine} engine (CPU)", median_ms(mine), "ms", "ratio", limit,
                        median_ms(raw), note=note))  # fmt: skip
    return rows


async def resolution_cost(rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "connectors" / "demo").mkdir(parents=True)
        (root / "connectors" / "demo" / "echo.yml").write_text("type: scripted\nrules: [{reply: hi}]\n")
        (root / "app.yml").write_text("roles:\n  default: demo.echo\n  light: demo.echo\n")
        app = load_app(root)
        store = SqlStore(await open_engine(store_url("sqlite:///agent.db", root)))
        await store.set_role(("team", "acme"), "light", ["demo.echo"])
        who = Identity("bob", "acme")
        for label, ref, identity in (("team setting (1 query)", "use::light", who),
                                     ("app default (2 queries)", "use::heavy", Identity("carol"))):  # fmt: skip
            for _ in range(50):
                await resolve_connectors(ref, app, identity, store)
            samples = []
            for _ in range(rounds):
                start = time.perf_counter()
                await resolve_connectors(ref, app, identity, store)
                samples.append(time.perf_counter() - start)
            print(f"resolution, {label:<24} median {statistics.median(samples) * 1e6:7.0f} µs (SQLite, warm)")
        await store.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=100)
    args = parser.parse_args()
    with fake_provider() as base_url:
        print_table(asyncio.run(measure(base_url, args.calls)))
    asyncio.run(resolution_cost(500))


if __name__ == "__main__":
    main()
