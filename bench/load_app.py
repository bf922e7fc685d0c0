"""How long `yao-agent validate` takes as a cold process: the example app and a generated 1,000-assistant app;
and `yao-agent --help`.

    .venv/bin/python bench/load_app.py [--runs 7] [--assistants 1000]

Each figure is the median wall time of fresh processes of the installed `yao-agent` script, over
compiled bytecode, as a user has it (see `bench.common.installed_cli`), alternating the three so
machine noise hits them alike; the notes give the median CPU time of the same processes and the
fastest wall time (what other work on a shared machine inflates least). The
generated app is realistic: every assistant has prompts with templates, a role, a preset, options
and an MCP server; connectors and MCP servers are shared.
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

from bench.common import REPO, Row, children_cpu, installed_cli, print_table

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


HELP_S = 0.15  # a command's help is read at once


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


def cold(command: list[str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one fresh process."""
    cpu, started = children_cpu(), time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{command} failed:\n{done.stdout}{done.stderr}")
    return elapsed, children_cpu() - cpu


def measure(runs: int, assistants: int) -> list[Row]:
    """Medians of fresh processes, alternating `--help`, the example app and the big app."""
    cli = installed_cli()
    with tempfile.TemporaryDirectory() as tmp:
        commands = {"help": [*cli, "--help"], "small": [*cli, "validate", "--app", str(REPO)],
                    "big": [*cli, "validate", "--app", str(generate(Path(tmp), assistants))]}  # fmt: skip
        for command in commands.values():  # warm the OS file cache, then measure
            cold(command)
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
        for _ in range(runs):
            for name, command in commands.items():
                times[name].append(cold(command))
    wall, cpu = ({name: statistics.median(t[i] for t in found) for name, found in times.items()} for i in (0, 1))
    fastest = {name: min(t[0] for t in found) for name, found in times.items()}
    return [
        Row("`yao-agent --help`, cold process", wall["help"], "s", "max", HELP_S,
            note=f"CPU {cpu['help']:.2f} s; fastest {fastest['help']:.2f} s"),
        Row("`yao-agent validate` on the example app, cold process", wall["small"], "s", "max", 0.5,
            note=f"CPU {cpu['small']:.2f} s; fastest {fastest['small']:.2f} s; "
                 f"an app of {assistants:,} assistants: {wall['big']:.2f} s"),
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--assistants", type=int, default=1000)
    args = parser.parse_args()
    print_table(measure(args.runs, args.assistants))


if __name__ == "__main__":
    main()
