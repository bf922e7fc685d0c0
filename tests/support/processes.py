"""The hook worker processes of this test process, as /proc shows them: which run, which are zombies."""

from __future__ import annotations

import os
from pathlib import Path


def _children() -> list[tuple[int, str, bytes]]:
    """(pid, state, command line) of every child of this process."""
    found: list[tuple[int, str, bytes]] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            command = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if int(stat[1]) == os.getpid():
            found.append((int(entry), stat[0], command))
    return found


def worker_pids() -> list[int]:
    """This process's children that run hooks (zombies aside)."""
    return [pid for pid, state, command in _children() if state != "Z" and b"yao_agent/hooks/worker.py" in command]


def zombies() -> list[int]:
    """Children of this process that ended and were never reaped."""
    return [pid for pid, state, _ in _children() if state == "Z"]


def running_workers() -> list[int]:
    """Hook workers on a CPU right now: an idle one waits for its next request (state S), one still
    running JavaScript, or spinning in any way, stays R. Polled by `wait_until`: an idle worker is
    never R for long, a runaway one always is."""
    return [pid for pid, state, command in _children() if state == "R" and b"yao_agent/hooks/worker.py" in command]
