"""What every benchmark shares: the fake provider in its own process, alternating samples, the table.

Each figure is a median over samples that alternate ours and the baseline (A B A B …), so the noise
of a shared machine falls on both alike; a verdict compares it with the target of issue "Benchmarks".
"""

from __future__ import annotations

import argparse
import asyncio
import compileall
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

REPO = Path(__file__).resolve().parents[1]
MODEL = "chunks:20"  # the fake provider's 20-chunk reply: what every call of the CPU benchmarks streams
PLAIN = [{"role": "user", "content": "Say something in twenty chunks."}]
Sample = tuple[float, float]  # (CPU seconds of this process, wall seconds)


@dataclass(frozen=True)
class Row:
    """One line of the table. `kind` says how `ours` meets `limit`: as a ratio to the baseline, as the
    amount added to the baseline, or as a plain maximum; or, for what should be high (a rate, a recall),
    `min`: at least `limit`, as a ratio to the baseline when there is one, else as a plain minimum."""

    measure: str
    ours: float
    unit: str
    kind: Literal["ratio", "added", "max", "min"]
    limit: float
    baseline: float | None = None
    note: str = ""

    @property
    def figure(self) -> float:
        if self.kind == "ratio" or (self.kind == "min" and self.baseline is not None):
            return self.ours / self.baseline if self.baseline else float("inf")
        if self.kind == "added":
            return self.ours - (self.baseline or 0.0)
        return self.ours

    @property
    def met(self) -> bool:
        return self.figure >= self.limit if self.kind == "min" else self.figure <= self.limit

    @property
    def target(self) -> str:
        if self.kind == "ratio":
            return f"≤ {self.limit:.2f}×"
        if self.kind == "min":
            return f"≥ {self.limit:.2f}×" if self.baseline is not None else f"≥ {self.limit:g} {self.unit}"
        sign = "+" if self.kind == "added" else ""
        return f"{sign}≤ {self.limit:g} {self.unit}"


def print_table(rows: Sequence[Row]) -> None:
    head = f"{'measure':<58} {'ours':>10} {'baseline':>10} {'ratio':>7} {'target':>12}  verdict"
    print(head)
    print("-" * len(head))
    for row in rows:
        base = f"{row.baseline:.3g}" if row.baseline is not None else "—"
        ratio = f"{row.ours / row.baseline:.2f}×" if row.baseline else "—"
        verdict = "met" if row.met else "MISSED"
        print(f"{row.measure:<58} {row.ours:>7.3g} {row.unit:<2} {base:>10} {ratio:>7} {row.target:>12}  {verdict}")
        if row.note:
            print(f"    {row.note}")


def median_ms(samples: Sequence[Sample], index: int = 0) -> float:
    return statistics.median(s[index] for s in samples) * 1000


def paired_ratios(ours: Sequence[Sample], baseline: Sequence[Sample]) -> str:
    """The quartiles of ours / baseline taken round by round: how steady the ratio of the medians is."""
    ratios = [a[0] / b[0] for a, b in zip(ours, baseline, strict=True) if b[0] > 0]
    return f"round by round {percentile(ratios, 0.25):.2f}–{percentile(ratios, 0.75):.2f}× (quartiles)"


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


SETTLE_S = 0.03  # long enough for what a call leaves running (litellm logs each call in a task and threads)


async def sample(call: Callable[[], Awaitable[object]], before: Callable[[], None] | None = None) -> Sample:
    """CPU of the call and of what it leaves behind, and its wall time.

    litellm finishes a streamed call's logging after the stream ends, on the loop and on threads
    (several ms of CPU). Counting the CPU until that has settled charges every call its own work —
    not the next sample, which would be ours or the baseline's by turns.
    """
    if before is not None:
        before()  # set-up that is not measured (e.g. scripting the fake provider)
    cpu, wall = time.process_time(), time.perf_counter()
    await call()
    wall = time.perf_counter() - wall
    await asyncio.sleep(SETTLE_S)
    return time.process_time() - cpu, wall


async def alternate(
    ways: dict[str, Callable[[], Awaitable[object]]],
    runs: int,
    *,
    warmup: int = 10,
    before: Callable[[], None] | None = None,
    mirror: bool = False,
) -> dict[str, list[Sample]]:
    """Run each way once per round, round after round; the first `warmup` rounds are not kept.

    With `mirror`, every other round runs the ways in reverse order (A B, B A, A B …): whatever a way
    leaves for the next sample, and a place in the round itself, then falls on each way alike."""
    out: dict[str, list[Sample]] = {name: [] for name in ways}
    for round_ in range(warmup + runs):
        order = list(ways.items())
        for name, call in reversed(order) if mirror and round_ % 2 else order:
            taken = await sample(call, before)
            if round_ >= warmup:
                out[name].append(taken)
    return out


def installed_cli() -> list[str]:
    """`yao-agent` as a user starts it: the virtualenv's console script, the package's bytecode compiled
    beforehand as installers do (pip, `uv --compile-bytecode`). This checkout is installed editable: its
    .py files stay here, and with PYTHONDONTWRITEBYTECODE set (or a read-only tree) no .pyc is written,
    so each start would compile the ~110 modules of a chat again (about 0.1 s) — a cost no user pays."""
    compileall.compile_dir(REPO / "yao_agent", quiet=1)
    script = Path(sys.executable).with_name("yao-agent")
    return [str(script)] if script.exists() else [sys.executable, "-m", "yao_agent.cli"]


def children_cpu() -> float:
    """CPU seconds of the child processes waited for so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def start_fake() -> tuple[subprocess.Popen[str], str]:
    """The loopback fake provider in a process of its own, so its work is not counted as ours."""
    process = subprocess.Popen(
        [sys.executable, "-m", "yao_agent.testing.fake_provider", "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    if not line.startswith("READY "):
        process.kill()
        raise SystemExit(f"fake provider did not start: {line!r}")
    return process, line.split(" ", 1)[1]


@contextmanager
def fake_provider() -> Iterator[str]:
    process, url = start_fake()
    try:
        yield url
    finally:
        process.terminate()
        process.wait(10)


def write_app(root: Path, files: dict[str, str], **values: str) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.format(**values))
    return root


def runs_main(doc: str | None, measure: Callable[[str, int], Awaitable[Sequence[Row]]]) -> None:
    """`python bench/NAME.py [--runs N]`: one benchmark against a fake provider of its own."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    with fake_provider() as url:
        print_table(asyncio.run(measure(url, args.runs)))
