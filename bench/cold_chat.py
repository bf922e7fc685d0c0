"""How long a person waits for a cold one-turn `yao-agent chat`: a fresh process, start to exit.

    .venv/bin/python bench/cold_chat.py [--runs 7]

The process is the installed `yao-agent` script, over compiled bytecode, as a user has it (see
`bench.common.installed_cli`).

Two assistants of one throw-away app answer "hi": one on an `openai`-engine connector pointed at the
loopback fake provider (in its own process), one on a `scripted` connector without a delay, so both
figures are start-up plus the same short run. Each figure is the median wall time of fresh
processes, the two alternating so machine noise hits both alike; the store is created beforehand.
The note gives the median CPU time of the same processes, which other work on the machine does not
inflate as it does wall time, and the fastest wall time.
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

from bench.common import Row, children_cpu, fake_provider, installed_cli, print_table, write_app

APP = {
    "app.yml": "store: sqlite:///.yao/agent.db\n",
    "connectors/bench/openai.yml": "type: openai\nmodel: text\nbase_url: {url}\napi_key: sk-bench\n",
    "connectors/bench/scripted.yml": "type: scripted\nrules:\n  - reply: 'Hello world'\n",
    "assistants/openai/assistant.yml": "name: OpenAI\nconnector: bench.openai\n",
    "assistants/scripted/assistant.yml": "name: Scripted\nconnector: bench.scripted\n",
}
ENGINES = ("openai", "scripted")
TARGET_S = 1.0


def cold_chat(cli: list[str], app: Path, assistant: str) -> tuple[float, float]:
    """(wall, CPU) seconds of one fresh process."""
    cpu, started = children_cpu(), time.perf_counter()
    done = subprocess.run([*cli, "--app", str(app), "chat", assistant, "hi"], capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if done.returncode != 0 or "Hello world" not in done.stdout:
        raise SystemExit(f"chat {assistant} failed:\n{done.stdout}{done.stderr}")
    return elapsed, children_cpu() - cpu


def measure(url: str, runs: int) -> list[Row]:
    """Medians of fresh processes, alternating the two engines."""
    cli = installed_cli()
    with tempfile.TemporaryDirectory() as tmp:
        app = write_app(Path(tmp), APP, url=url)
        for engine in ENGINES:  # creates the store, warms the OS file cache; not kept
            cold_chat(cli, app, engine)
        samples: dict[str, list[tuple[float, float]]] = {engine: [] for engine in ENGINES}
        for _ in range(runs):
            for engine in ENGINES:
                samples[engine].append(cold_chat(cli, app, engine))
    rows: list[Row] = []
    for engine in ENGINES:
        wall, cpu = (statistics.median(s[i] for s in samples[engine]) for i in (0, 1))
        fastest = min(s[0] for s in samples[engine])
        rows.append(Row(f"cold one-turn `yao-agent chat`, {engine} engine (wall)", wall, "s", "max", TARGET_S,
                        note=f"CPU {cpu:.2f} s; fastest {fastest:.2f} s"))  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    with fake_provider() as url:
        print_table(measure(url, args.runs))


if __name__ == "__main__":
    main()
