"""How long `yao-agent validate` takes as a cold process: the example app and a generated 1,000-assistant app.

    .venv/bin/python bench/load_app.py [--runs 7] [--assistants 1000]

Each figure is the median wall time of fresh processes, alternating the two apps so machine noise
hits both alike. The generated app is realistic: every assistant has prompts with templates, a role,
a preset, options and an MCP server; connectors and MCP servers are shared.
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

from bench.common import REPO, Row, print_table

ASSISTANT = """\
name: Assistant {n}
description: Generated assistant number {n}
connector: {connector}
prompts:
  - role: system
    content: |
      You are {{{{ assistant.name }}}} (number {n}) for {{{{ user_id }}}}
      {{% if team_id %}}of team {{{{ team_id }}}}{{% endif %}}.
      Locale: {{{{ locale }}}}. Today is {{{{ now.date() }}}}.
prompt_presets:
  brief:
    - role: system
      content: "Answer assistant {n}'s questions in one sentence, {{{{ user_id }}}}."
options: {{temperature: 0.{t}, max_tokens: 400}}
mcp:
  servers: [{{server: tools{s}, tools: [lookup]}}]
access: {{public: true}}
"""


def generate(root: Path, count: int) -> Path:
    (root / "connectors" / "demo").mkdir(parents=True)
    (root / "mcps").mkdir()
    (root / "app.yml").write_text("roles:\n  default: demo.c0\n  light: [demo.c1, demo.c0]\n")
    for c in range(10):
        (root / "connectors" / "demo" / f"c{c}.yml").write_text(
            "type: scripted\nrules:\n  - match: {user: '(?i)hello'}\n    reply: 'Hi {{ last_user }}'\n  - reply: ok\n"
        )
    for s in range(5):
        (root / "mcps" / f"tools{s}.yml").write_text("command: python\nargs: [-m, tools]\ntimeout_s: 10\n")
    for n in range(count):
        folder = root / "assistants" / f"team{n % 20}" / f"a{n}"
        folder.mkdir(parents=True)
        connector = "use::light" if n % 2 else f"demo.c{n % 10}"
        text = ASSISTANT.format(n=n, connector=connector, t=n % 10, s=n % 5)
        (folder / "assistant.yml").write_text(text)
    return root


def cold_validate(app: Path) -> float:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "yao_agent.cli", "validate", "--app", str(app)], capture_output=True, text=True
    )
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"validate failed on {app}:\n{done.stdout}{done.stderr}")
    return elapsed


def measure(runs: int, assistants: int) -> list[Row]:
    """Medians of fresh processes, alternating the two apps."""
    with tempfile.TemporaryDirectory() as tmp:
        big = generate(Path(tmp), assistants)
        cold_validate(REPO)  # warm the OS file cache and .pyc files for both, then measure
        cold_validate(big)
        small_times: list[float] = []
        big_times: list[float] = []
        for _ in range(runs):
            small_times.append(cold_validate(REPO))
            big_times.append(cold_validate(big))
    big_note = f"an app of {assistants:,} assistants: {statistics.median(big_times):.2f} s"
    return [Row("`yao-agent validate` on the example app, cold process", statistics.median(small_times), "s", "max",
                0.5, note=big_note)]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--assistants", type=int, default=1000)
    args = parser.parse_args()
    print_table(measure(args.runs, args.assistants))


if __name__ == "__main__":
    main()
