"""What an app folder can hold that must not hang or sink the process: alias bombs, FIFOs, runaway
templates; and the store's file, which only its owner may read."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.apps import make_app
from yao_agent.dsl.templates import render
from yao_agent.errors import RenderError
from yao_agent.store import SqlStore, open_engine, store_url

REPO = Path(__file__).resolve().parents[2]
BOMB = """\
name: Bomb
a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]
"""


def validate(app: Path) -> subprocess.CompletedProcess[str]:
    """`yao-agent validate` in a process of its own: a hang is a failed test, not a stuck suite."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "yao_agent.cli", "validate", "--app", str(app)],
                          capture_output=True, text=True, env=env, timeout=60)  # fmt: skip


def test_a_yaml_alias_bomb_is_a_located_error(tmp_path: Path) -> None:
    app = make_app(tmp_path, {"assistants/bomb/assistant.yml": BOMB})
    done = validate(app)
    assert done.returncode == 2, done.stdout + done.stderr
    assert (
        "assistants/bomb/assistant.yml:7 f: the file expands to more than 100,000 values (YAML aliases repeated "
        "too often?)" in done.stdout
    )


def test_a_fifo_in_place_of_a_file_is_refused_not_waited_for(tmp_path: Path) -> None:
    app = make_app(tmp_path, {})
    (app / "assistants" / "piped").mkdir()
    os.mkfifo(app / "assistants" / "piped" / "assistant.yml")
    done = validate(app)
    assert done.returncode == 2
    assert "assistants/piped/assistant.yml: not a regular file (expected a YAML file)" in done.stdout


@pytest.mark.parametrize(
    ("template", "said"),
    [
        ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "took longer than 0.1 s"),
        ("{{ 'x' * 10**8 }}", "a value of 100,000,000 items"),
        ("{{ 'x' | center(1000000000) }}", "filter center: 1,000,000,000 is too large"),
        ("{{ 2 ** 100000 }}", "2 ** 100000 is too large a number"),
        ("{{ range(10**7) | list }}", "range of 10,000,000 items"),
        ("one\n{{ 1 / 0 }}", "(line 2 of the template): ZeroDivisionError: division by zero"),
        ("{{ now.strftime(None) }}", "TypeError: strftime() argument 1 must be str, not None"),
    ],
)
def test_a_template_is_bounded_and_its_failures_say_where(template: str, said: str) -> None:
    from datetime import UTC, datetime

    with pytest.raises(RenderError) as caught:
        render(template, {"now": datetime.now(UTC)}, "assistants/x/assistant.yml:4")
    assert str(caught.value).startswith("assistants/x/assistant.yml:4 template failed to render")
    assert said in str(caught.value)


class Descheduled:
    """A value whose rendering waits without using the CPU, as a thread does on a busy machine."""

    def __str__(self) -> str:
        time.sleep(0.06)
        return "ok"


def test_a_template_waiting_for_its_turn_on_a_busy_machine_is_not_over_its_budget() -> None:
    """The budget is of CPU time: 0.18 s spent waiting (not computing) is not a loop gone wrong."""
    rendered = render("{% for i in range(3) %}{{ slow }} {% endfor %}", {"slow": Descheduled()}, "app.yml:3")
    assert rendered == "ok ok ok "


def test_a_template_that_takes_long_to_compile_but_renders_fast_is_within_its_budget() -> None:
    """The budget is the rendering's: compiling (once per template; slower still under a tracer, as in a
    coverage run) does not count against it."""
    source = "{{ a }}" * 4000 + "{% for i in range(2) %}{% endfor %}"  # compiles in ~0.3 s, renders in ms
    assert render(source, {"a": "x"}, "app.yml:3") == "x" * 4000


async def test_the_sqlite_store_is_readable_by_its_owner_alone(tmp_path: Path) -> None:
    path = tmp_path / "fresh" / "agent.db"
    store = SqlStore(await open_engine(store_url(f"sqlite:///{path}", tmp_path)))
    await store.aclose()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
