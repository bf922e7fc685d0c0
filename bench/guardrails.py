"""What the personal-data guardrails add: a plain run's CPU with and without them, alternated, and the CPU
of one streamed chunk through the output hold-back.

    .venv/bin/python bench/guardrails.py [--runs 200]

The run: one model call streaming 20 chunks, stored (openai engine, SQLite), as `bench/pipeline.py`'s
plain run; the guarded assistant checks its input and its answer for every kind of personal data
(email, phone, credit_card, iban, us_ssn, uk_nino), masking. The chunk: a 20-chunk answer with a card
number and an email address in it, fed through the hold-back one chunk at a time. Medians of this
process's CPU time; the fake provider runs in its own process.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import bench  # noqa: F401  (before litellm: it puts litellm offline)

# isort: split
from bench.common import MODEL, PLAIN, Row, alternate, median_ms, runs_main, write_app
from bench.pipeline import APP, ours
from yao_agent.dsl.specs import GuardCheck
from yao_agent.guardrails import pii
from yao_agent.guardrails.stream import HoldBack
from yao_agent.service.runs import Runs

KINDS = ", ".join(pii.KINDS)
GUARDED = (
    "name: Guarded\nconnector: bench.openai\n"
    f"guardrails: {{{{input: [{{{{pii: [{KINDS}]}}}}], output: [{{{{pii: [{KINDS}]}}}}]}}}}\n"
)
RUN_LIMIT = 1.10  # issue 32: the PII set adds at most 10 % to a plain run's CPU
CHUNK_LIMIT_MS = 0.05  # what a chunk may cost the hold-back: a 20-chunk answer, 1 ms at most
ANSWER = ("Thanks, I have your details: the card 4111 1111 1111 1111 is on file, and the receipt goes to "
          "ann.smith@example.com within the hour. Anything else I can help you with today?")  # fmt: skip


def chunk_ms(samples: int) -> float:
    """Median CPU ms of one chunk through the hold-back (the answer in 20 chunks, then its finish)."""
    check = GuardCheck("pii", "mask", "app.yml", 1, pii=pii.KINDS)
    size = -(-len(ANSWER) // 20)
    chunks = [ANSWER[i : i + size] for i in range(0, len(ANSWER), size)]
    per: list[float] = []
    for _ in range(samples):
        held = HoldBack([check], 64)
        started = time.process_time()
        for chunk in chunks:
            held.feed(chunk)
        held.finish()
        per.append((time.process_time() - started) / len(chunks))
    assert held.shown.count("[credit_card]") == 1 and "[email]" in held.shown, held.shown
    return statistics.median(per) * 1000


async def measure(url: str, runs: int) -> list[Row]:
    files = {**APP, "assistants/guarded/assistant.yml": GUARDED}
    with tempfile.TemporaryDirectory() as tmp:
        service = await Runs.open(write_app(Path(tmp), files, url=url, model=MODEL), db=f"sqlite:///{tmp}/agent.db")
        try:
            ways = {"guarded": ours(service, "guarded", PLAIN), "plain": ours(service, "plain_openai", PLAIN)}
            got = await alternate(ways, runs, warmup=20)
        finally:
            await service.aclose()
    guarded, plain = median_ms(got["guarded"]), median_ms(got["plain"])
    per_chunk = chunk_ms(max(200, runs * 5))
    wall = f"wall {median_ms(got['guarded'], 1):.2f} vs {median_ms(got['plain'], 1):.2f} ms"
    return [
        Row("plain run with the PII guardrails on input and output (CPU)", guarded, "ms", "ratio", RUN_LIMIT, plain,
            note=f"every kind, masking; {wall}"),
        Row("a streamed chunk through the PII hold-back (CPU)", per_chunk, "ms", "max", CHUNK_LIMIT_MS,
            note="a 170-character answer with a card number and an email address, in 20 chunks"),
    ]  # fmt: skip


if __name__ == "__main__":
    runs_main(__doc__, measure)
