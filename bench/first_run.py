"""The first run after start in a fresh process: what a short-lived worker, a CLI call or a serverless
function pays, beside the raw `openai` SDK making its one streamed call in a fresh process.

    .venv/bin/python bench/first_run.py [--runs 9]

Each sample is a fresh Python process (over compiled bytecode, as installers leave a package) that
embeds yao-agent as the Python API does (`Runs.open` on an app whose store exists, then `runs.stream`
of one "hi") and prints a line at the run's `stream_end`; the baseline process imports `openai`, makes
an `AsyncOpenAI` client and reads one streamed completion to its end. Wall time is from just before the
process is started (interpreter start-up included) to that line, so the exit is not counted; CPU is the
process's own until then (`time.process_time` at the line). The three kinds alternate sample by sample
so machine noise hits them alike; medians are reported. Both model calls go to the loopback fake
provider (its own process); the scripted row has no model call at all: start-up and the run alone.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.cold_chat import APP  # the same throw-away app: one openai-engine and one scripted assistant
from bench.common import REPO, Row, fake_provider, installed_cli, print_table, write_app

# What each fresh process runs. When the run's stream has ended it prints its CPU seconds so far, then
# the CPU and wall seconds since just before the runtime (the client) was made, the reply, the status.
OURS = """\
import asyncio, sys, time
from yao_agent import Identity, MessageDelta, RunRequest, Runs, StreamEnd

async def main(app, assistant):
    cpu, wall, text = time.process_time(), time.perf_counter(), []
    async with await Runs.open(app) as runs:
        ask = RunRequest(assistant, Identity("bench"), [{"role": "user", "content": "hi"}])
        async for event in runs.stream(ask):
            if isinstance(event, MessageDelta) and event.text:
                text.append(event.text)
            elif isinstance(event, StreamEnd):
                now = time.process_time()
                print(now, now - cpu, time.perf_counter() - wall, "".join(text).replace(" ", "_"), event.status,
                      flush=True)

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""
RAW_SDK = """\
import asyncio, sys, time
import openai

async def main(url):
    cpu, wall = time.process_time(), time.perf_counter()
    client = openai.AsyncOpenAI(base_url=url, api_key="sk-bench")
    stream = await client.chat.completions.create(
        model="text", messages=[{"role": "user", "content": "hi"}], stream=True)
    text = [chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices]
    now = time.process_time()
    print(now, now - cpu, time.perf_counter() - wall, "".join(text).replace(" ", "_"), "completed", flush=True)

asyncio.run(main(sys.argv[1]))
"""
KINDS = ("openai", "scripted", "sdk")
TARGET_S = 0.2  # the first run, from just before the runtime is made and from the process's start (issue 35)
Sample = tuple[float, float, float, float]  # wall and CPU from the process's start; wall and CPU from the runtime's


def first_run(argv: list[str]) -> Sample:
    """One fresh process, until the line it prints at stream_end."""
    started = time.perf_counter()
    # From this checkout's folder, `python -c` imports this checkout's package, wherever the bench was started.
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    assert process.stdout is not None
    line = process.stdout.readline()
    elapsed = time.perf_counter() - started
    out, err = process.communicate()
    fields = line.split()
    if process.returncode != 0 or len(fields) != 5 or fields[3:] != ["Hello_world", "completed"]:
        raise SystemExit(f"{argv[-1]} failed:\n{line}{out}{err}")
    return elapsed, float(fields[0]), float(fields[2]), float(fields[1])


def measure(url: str, runs: int) -> list[Row]:
    """Medians of fresh processes, the three kinds alternating."""
    python = [sys.executable, "-c"]
    installed_cli()  # compiles the package's bytecode, as an installer does
    with tempfile.TemporaryDirectory() as tmp:
        app = str(write_app(Path(tmp), APP, url=url))
        argv = {
            "openai": [*python, OURS, app, "openai"],
            "scripted": [*python, OURS, app, "scripted"],
            "sdk": [*python, RAW_SDK, url],
        }
        for kind in KINDS:  # creates the store, warms the OS file cache; not kept
            first_run(argv[kind])
        samples: dict[str, list[Sample]] = {kind: [] for kind in KINDS}
        for _ in range(runs):
            for kind in KINDS:
                samples[kind].append(first_run(argv[kind]))
    return [row for engine in ("openai", "scripted") for row in rows(engine, samples)]


def rows(engine: str, samples: dict[str, list[Sample]]) -> list[Row]:
    """From just before the runtime is made (the SDK's client; its import done), then from the process's start."""
    ours, sdk = ([statistics.median(s[i] for s in samples[kind]) for i in range(4)] for kind in (engine, "sdk"))
    ms = "{:.0f} ms CPU, the raw SDK's {:.0f} ms".format
    return [
        Row(f"first run in a fresh process, {engine} engine, from making the runtime (wall)", ours[2], "s", "max",
            TARGET_S, baseline=sdk[2], note=ms(ours[3] * 1000, sdk[3] * 1000)),
        Row(f"first run in a fresh process, {engine} engine, from the process's start (wall)", ours[0], "s", "max",
            TARGET_S, baseline=sdk[0], note=ms(ours[1] * 1000, sdk[1] * 1000)),
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    with fake_provider() as url:
        print_table(measure(url, args.runs))


if __name__ == "__main__":
    main()
