"""`yao-agent` as a person runs it: in this process (exit code, output) or on a pseudo-terminal."""

from __future__ import annotations

import io
import os
import select
import subprocess
import sys
import termios
import time
from pathlib import Path

from tests.support import REPO
from yao_agent.cli import main


def cli(app: Path, *args: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(["--app", str(app), *args], out=out)
    return code, out.getvalue()


class Terminal:
    """`yao-agent` on a pseudo-terminal, as a person at a keyboard has it."""

    def __init__(self, home: Path, *args: str) -> None:
        self.master, slave = os.openpty()
        self.mode = termios.tcgetattr(self.master)
        env = {**os.environ, "PYTHONPATH": str(REPO), "HOME": str(home), "TERM": "xterm"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "yao_agent.cli", *args],
            stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True,
        )  # fmt: skip
        os.close(slave)
        self.seen = b""

    def wait_for(self, text: bytes, timeout: float = 60) -> bytes:
        """Read until `text` has appeared (again), and return what came since the last wait."""
        start, deadline = len(self.seen), time.monotonic() + timeout
        while text not in self.seen[start:] and time.monotonic() < deadline:
            if select.select([self.master], [], [], 0.1)[0]:
                self.seen += os.read(self.master, 4096)
        assert text in self.seen[start:], self.seen.decode(errors="replace")
        return self.seen[start:]

    def type(self, keys: bytes) -> None:
        os.write(self.master, keys)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)
        os.close(self.master)


class Cli:
    """`yao-agent --app APP --db DB …` run in this process: (exit code, stdout)."""

    def __init__(self, app: Path, db: str) -> None:
        self.app, self.db = app, db

    def __call__(self, *args: str) -> tuple[int, str]:
        out = io.StringIO()
        code = main(["--app", str(self.app), "--db", self.db, *args], out=out)
        return code, out.getvalue()

    def words(self) -> list[str]:
        return ["--app", str(self.app), "--db", self.db]
