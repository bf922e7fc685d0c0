"""What OpenTelemetry tracing adds to a plain run's CPU: the same run traced and not, alternated.

    .venv/bin/python bench/traces.py [--runs 200]

A plain run (one model call streaming 20 chunks, stored; openai engine) through `Runs`, as the server
runs it. Traced, its span tree is built when it is stored and handed to the SDK's batch processor,
which exports it over OTLP/HTTP to a receiver in a process of its own (what a collector costs is not
ours); not traced, the same process with tracing's observer removed. With no OTEL_* set nothing of
OpenTelemetry's SDK is imported and no observer exists (tests/server/test_traces.py): off adds nothing.
Medians of this process's CPU time.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Awaitable, Callable, Generator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import bench  # noqa: F401  (before litellm: it puts litellm offline)

# isort: split
from bench.common import Row, median_ms, runs_main
from bench.pipeline import plain_two_ways
from yao_agent.observe import tracing

LIMIT = 1.15  # issue 19: tracing on adds at most 15 % to a plain run's CPU
RECEIVER = """
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
class H(BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
    def log_message(self, *args): pass
server = HTTPServer(("127.0.0.1", 0), H)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


@contextmanager
def receiver() -> Generator[str]:
    """An OTLP/HTTP endpoint that accepts and drops traces, in a process of its own."""
    process = subprocess.Popen([sys.executable, "-c", RECEIVER], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        yield f"http://127.0.0.1:{process.stdout.readline().strip()}"
    finally:
        process.terminate()
        process.wait()


def untraced(call: Callable[[], Awaitable[None]]) -> Callable[[], Awaitable[None]]:
    async def run() -> None:
        with tracing.off():
            await call()

    return run


async def measure(url: str, runs: int) -> list[Row]:
    with receiver() as endpoint:
        assert tracing.setup({"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}), "tracing needs yao-agent[otel]"
        got = await plain_two_ways(url, runs, lambda plain: {"on": plain, "off": untraced(plain)})
        tracing.shutdown()  # what is queued is sent (its CPU is not in the medians)
    on, off = median_ms(got["on"]), median_ms(got["off"])
    wall = f"wall {median_ms(got['on'], 1):.2f} vs {median_ms(got['off'], 1):.2f} ms"
    note = f"tracing on {on:.3f} ms vs off {off:.3f} ms; {wall}"
    return [Row("plain run with OpenTelemetry tracing on (CPU)", on, "ms", "ratio", LIMIT, off, note=note)]


def main() -> None:
    runs_main(__doc__, measure)


if __name__ == "__main__":
    main()
