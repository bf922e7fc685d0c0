"""Importing the package, engines included, opens no socket: litellm's cost map stays local."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

PROBE = """
import socket
attempts = []
real_connect, real_getaddrinfo = socket.socket.connect, socket.getaddrinfo
def connect(self, address):
    attempts.append(("connect", address))
    return real_connect(self, address)
def getaddrinfo(*args, **kwargs):
    attempts.append(("getaddrinfo", args[0]))
    return real_getaddrinfo(*args, **kwargs)
socket.socket.connect, socket.getaddrinfo = connect, getaddrinfo
import yao_agent, yao_agent.connectors, yao_agent.connectors.openai_engine, yao_agent.connectors.litellm_engine
import threading
for thread in threading.enumerate():  # a fetch in the background runs in a thread: let each one finish
    if thread is not threading.current_thread():
        thread.join(60)
print("ATTEMPTS", attempts)
"""


@pytest.mark.slow
def test_import_opens_no_socket() -> None:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}  # no LITELLM_* set: the package must set them
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "ATTEMPTS []" in done.stdout, done.stdout + done.stderr
