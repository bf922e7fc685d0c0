"""What the context budget costs: counting a 100k-token request, and the CPU the check adds to a run.

    .venv/bin/python bench/context.py [--runs 200]

Counting: one chat-completions request of about 100,000 tokens (40 messages of English, code and
JSON), counted cold — every text new to the counter — with tiktoken's o200k (an OpenAI model) and with
the estimate (any other model); then warm, as the later calls of a run count what they counted before.

A run: a plain run (one user message, one model reply in 20 chunks, stored) of an assistant without a
window beside the same run of one with `context.max_input_tokens` (so every call is counted and
checked), on a fresh chat and on a chat with 20 messages of history. The model is the in-process
double (no HTTP), so the difference is ours; medians of this process's CPU time per run.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import bench  # noqa: F401  (before litellm: it puts litellm offline)

# isort: split
from bench.common import Row, alternate, median_ms, print_table, write_app
from yao_agent.identity import Identity
from yao_agent.metering.tokens import TokenCounter, counter_for, load_encoding
from yao_agent.pipeline import RunRequest, Runtime
from yao_agent.service.runs import Runs
from yao_agent.testing import Reply, ScriptedModel

REPO = Path(__file__).resolve().parents[1]
WHO = Identity("bench")


def big_request(tokens: int = 100_000) -> list[dict[str, Any]]:
    """About `tokens` tokens (by o200k) of the repository's own prose, code and JSON, in 40 messages."""
    prose = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    texts = [p.read_text("utf-8") for p in (*prose, REPO / "yao_agent" / "metering" / "tokens.py",
                                            REPO / "yao_agent" / "dsl" / "schemas" / "assistant.json")]  # fmt: skip
    encoding = load_encoding("o200k_base")
    assert encoding is not None
    corpus, size = "", 0
    while size < tokens:
        corpus += "\n".join(texts)
        size = len(encoding.encode_ordinary(corpus))
    corpus = encoding.decode(encoding.encode_ordinary(corpus)[:tokens])
    step = len(corpus) // 40 + 1
    roles = ("user", "assistant", "tool")
    return [{"role": roles[i % 3], "content": corpus[at : at + step], **({"tool_call_id": "c"} if i % 3 == 2 else {})}
            for i, at in enumerate(range(0, len(corpus), step))]  # fmt: skip


def count_ms(make: Any, messages: list[dict[str, Any]], rounds: int) -> tuple[float, int]:
    """Median ms of counting `messages` with a counter `make()` gives (a fresh one: cold), and the count."""
    samples: list[float] = []
    counted = 0
    for _ in range(rounds):
        counter = make()
        start = time.perf_counter()
        counted = counter.request(messages)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1000, counted


def counting_rows(rounds: int) -> list[Row]:
    messages = big_request()
    encoding = load_encoding("o200k_base")
    rows: list[Row] = []
    for name, make in (("tiktoken o200k", lambda: TokenCounter("o200k_base", encoding)),
                       ("estimate", lambda: TokenCounter("estimate"))):  # fmt: skip
        ms, counted = count_ms(make, messages, rounds)
        rate = counted / ms * 1000 / 1e6
        rows.append(Row(f"count a 100k-token request, {name}, cold", ms, "ms", "max", 100.0,
                        note=f"{counted} tokens counted: {rate:.1f} M tokens/s"))  # fmt: skip
    warm = counter_for(["gpt-4o"])
    warm.request(messages)
    ms, counted = count_ms(lambda: warm, messages, rounds)
    rows.append(Row("count a 100k-token request again (texts counted before)", ms, "ms", "max", 5.0,
                    note=f"{counted / ms * 1000 / 1e6:.0f} M tokens/s"))  # fmt: skip
    return rows


APP = {
    "app.yml": "roles:\n  default: bench.model\nhistory_size: 20\n",
    "connectors/bench/model.yml": "type: openai\nmodel: gpt-4o-mini\nbase_url: http://in-process.invalid/v1\n"
    "api_key: x\n",
    "assistants/plain/assistant.yml": "name: Plain\n",
    "assistants/budgeted/assistant.yml": "name: Budgeted\ncontext: {{max_input_tokens: 128000}}\n",  # write_app formats
}


async def run_rows(runs: int) -> list[Row]:
    model = ScriptedModel(default=lambda _request: Reply(text="a reply of twenty chunks " * 3, chunk_size=4))
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = write_app(Path(tmp) / "app", APP)
        runtime = await Runtime.open(root, db=f"sqlite:///{Path(tmp) / 'bench.db'}")
        runtime.engines = model.engines()
        async with Runs(runtime) as service:
            for history in (0, 20):
                rows.append(await _run_row(service, history, runs))
    return rows


async def _run_row(service: Runs, history: int, runs: int) -> Row:
    said = [{"role": "user", "content": "Say something in twenty chunks, please."}]
    chats = {"plain": f"plain-{history}", "budgeted": f"budgeted-{history}"}
    for name, chat in chats.items():  # the history both chats start from
        for _ in range(history // 2):
            await service.run(RunRequest(name, WHO, said, chat_id=chat))
    fresh = iter(range(10**9))

    def one(name: str) -> Any:
        async def run() -> None:
            chat = chats[name] if history else f"{name}-new-{next(fresh)}"
            result = await service.run(RunRequest(name, WHO, said, chat_id=chat))
            assert result.status == "completed", result.error

        return run

    samples = await alternate({name: one(name) for name in chats}, runs, warmup=10)
    plain, budgeted = median_ms(samples["plain"]), median_ms(samples["budgeted"])
    what = f"CPU the context budget adds to a plain run, {history or 'no'} history messages"
    return Row(what, budgeted, "ms", "ratio", 1.05, baseline=plain)  # under 5 % of the run it is part of


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    print_table(measure(args.runs))


def measure(runs: int) -> list[Row]:
    return counting_rows(max(5, runs // 20)) + asyncio.run(run_rows(runs))


if __name__ == "__main__":
    main()
