"""The site's Python examples work as written, against the example app, offline: the OpenAI client
(tutorial/serving.md) and the Python API (guides/embedding.md)."""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import httpx
import pytest

from tests.support.docs import REPO, block


@pytest.mark.slow
def test_the_openai_client_example_runs_against_the_example_app(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "YAO_AGENT_DB": f"sqlite:///{tmp_path / 'agent.db'}"}
    run = [sys.executable, "-m", "yao_agent.cli", "--app", str(REPO)]
    token = subprocess.run([*run, "tokens", "create", "--user", "alice"], env=env, capture_output=True, text=True,
                           check=True).stdout.strip()  # fmt: skip
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen([*run, "serve", "--port", str(port)], env=env, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                httpx.get(f"http://127.0.0.1:{port}/healthz")
                break
            except httpx.ConnectError:
                time.sleep(0.2)
        code = block("openai-client").replace("http://127.0.0.1:8765", f"http://127.0.0.1:{port}")
        code = code.replace("ya_...your token...", token)
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    finally:
        server.terminate()
        server.wait(30)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "Hello! I'm the offline demo model. Everything I say comes from connectors/demo/echo.yml."
    assert lines[1].startswith("Here is what the weather service says: Paris day 1: ")


def test_the_python_api_example_runs_against_the_example_app(tmp_path: Path) -> None:
    """The embedding example, exactly as the page shows it, in the example app's folder (its store aside)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "YAO_AGENT_DB": f"sqlite:///{tmp_path / 'agent.db'}"}
    code = block("python-api")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "Hello! I'm the offline demo model. Everything I say comes from connectors/demo/echo.yml.",
        "[completed: completed]",
    ]
    with closing(sqlite3.connect(tmp_path / "agent.db")) as db:  # stored as any run is
        stored = db.execute("SELECT assistant_id, user_id, status FROM runs").fetchall()
    assert stored == [("chat", "alice", "completed")]
