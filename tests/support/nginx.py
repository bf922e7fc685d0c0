"""nginx in front of `yao-agent serve` processes, as docs/deploy/nginx.conf puts it there.

The tested configuration is the documented one: the file is read and only its `listen` and its two
upstream `server` addresses are changed. It is included in a main configuration of the test's own
(a private directory for nginx's pid, logs and temporary files; no daemon), whose access log says which
server answered each request, retries included. nginx runs in the foreground, as any user.

Each server is a real OS process on a port of its own that it keeps across restarts, so that a test can
kill it (SIGKILL, SIGTERM) and start it again behind the same nginx.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support import REPO
from tests.support.servers import said
from tests.support.waits import free_port

DOCUMENTED = REPO / "docs" / "deploy" / "nginx.conf"
NGINX = os.environ.get("YAO_AGENT_NGINX") or shutil.which("nginx") or "/usr/sbin/nginx"
REQUIRE_SERVICES = os.environ.get("YAO_AGENT_REQUIRE_SERVICES") == "1"
# `listen ADDRESS ...;` and an upstream's `server ADDRESS [parameters];`: (before, address, after).
LISTEN = re.compile(r"^(\s*listen\s+)([^\s;]+)([^;]*;)", re.MULTILINE)
SERVER = re.compile(r"^(\s*server\s+)([^\s;{]+)([^;{]*;)", re.MULTILINE)
START_S = 60.0  # the longest a start may take (a loaded CI machine is slow)

# The test's main configuration around the documented file. As root, nginx would run its worker as
# `nobody`, who may not enter the test's private directory: it runs as the user who starts it.
MAIN = """\
{user}
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log info;
events {{ worker_connections 1024; }}
http {{
    log_format upstreams escape=json
        '{{"request":"$request","status":"$status","upstream":"$upstream_addr","upstream_status":"$upstream_status"}}';
    access_log {dir}/access.log upstreams;
    client_body_temp_path {dir}/client_body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    include {dir}/yao-agent.conf;
}}
"""


def require_nginx() -> None:
    """Skip without nginx; in CI (YAO_AGENT_REQUIRE_SERVICES=1) fail instead, as a missing service must."""
    if not Path(NGINX).is_file():
        message = f"no nginx at {NGINX} (install Debian's nginx or set YAO_AGENT_NGINX)"
        if REQUIRE_SERVICES:
            pytest.fail(message)
        pytest.skip(message)


def documented(listen: str, upstreams: Sequence[str]) -> str:
    """docs/deploy/nginx.conf listening on `listen`, its upstream servers at `upstreams` (in order)."""
    text = DOCUMENTED.read_text()
    # The test changes exactly these addresses: a documented file that no longer has them must say so here.
    assert (len(LISTEN.findall(text)), len(SERVER.findall(text))) == (1, len(upstreams)), \
        f"{DOCUMENTED}: expected one `listen` and {len(upstreams)} upstream `server` lines"  # fmt: skip
    text = LISTEN.sub(lambda m: m.group(1) + listen + m.group(3), text)
    given = iter(upstreams)
    return SERVER.sub(lambda m: m.group(1) + next(given) + m.group(3), text)


@dataclass(frozen=True)
class Answer:
    """One request as nginx's access log has it: which servers it went to (in order) and what they said."""

    request: str
    status: int
    upstreams: tuple[str, ...]
    upstream_statuses: tuple[str, ...]


@dataclass
class Nginx:
    dir: Path
    port: int
    process: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def answers(self, path: str = "") -> list[Answer]:
        """The requests answered so far (whose path starts with `path`), oldest first."""
        lines = (self.dir / "access.log").read_text().splitlines()
        found = [json.loads(line) for line in lines]
        return [Answer(a["request"], int(a["status"]), split(a["upstream"]), split(a["upstream_status"]))
                for a in found if a["request"].split(" ")[1].startswith(path)]  # fmt: skip

    def errors(self) -> str:
        return (self.dir / "error.log").read_text()


def split(listed: str) -> tuple[str, ...]:
    """nginx's list of the upstreams a request tried (`a, b`; `a : b` across upstream groups)."""
    return tuple(part.strip() for part in re.split(r"[,:] ", listed) if part.strip() and part.strip() != "-")


@contextmanager
def fronting(upstreams: Sequence[str], where: Path) -> Generator[Nginx]:
    """nginx running the documented configuration in front of `upstreams`, until the block ends."""
    where.mkdir(parents=True, exist_ok=True)
    port = free_port()
    (where / "yao-agent.conf").write_text(documented(f"127.0.0.1:{port}", upstreams))
    user = "user root;" if os.geteuid() == 0 else ""
    (where / "nginx.conf").write_text(MAIN.format(user=user, dir=where))
    command = [NGINX, "-p", str(where), "-e", str(where / "error.log"), "-c", str(where / "nginx.conf"),
               "-g", "daemon off;"]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    proxy = Nginx(where, port, process)
    try:
        wait_listening(port, process, proxy.errors)
        yield proxy
    finally:
        process.send_signal(signal.SIGTERM)  # fast shutdown: open streams are closed, not waited for
        process.wait(30)


def wait_listening(port: int, process: subprocess.Popen[bytes], why: Callable[[], str]) -> None:
    """Until something accepts connections on `port`; fails with `why()` if `process` exits first."""
    deadline = time.monotonic() + START_S
    while True:
        assert process.poll() is None, why()
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        assert time.monotonic() < deadline, f"nothing listens on {port} after {START_S:g} s"
        time.sleep(0.02)


@dataclass(eq=False)  # one per process slot: compared, and hashed, by identity
class Server:
    """`yao-agent serve` of `app` on the database `db`, in an OS process of its own; its stderr in `log`."""

    app: Path
    db: str
    log: Path
    env: Mapping[str, str]
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __repr__(self) -> str:  # what a failed assertion names
        return f"Server({self.address})"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def spawn(self) -> None:
        """Start it; `wait_serving` waits until it serves (start several, then wait: they start at once)."""
        env = {**os.environ, "PYTHONPATH": str(REPO), **self.env}
        command = [sys.executable, "-m", "yao_agent.cli", "--app", str(self.app), "--db", self.db,
                   "serve", "--port", str(self.port)]  # fmt: skip
        with self.log.with_suffix(".out").open("w") as out, self.log.open("a") as err:
            self.process = subprocess.Popen(command, stdout=out, stderr=err, env=env, cwd=REPO)

    def wait_serving(self) -> None:
        """Until it says it serves (it prints its banner once it listens)."""
        assert self.process is not None
        deadline = time.monotonic() + START_S
        while f"127.0.0.1:{self.port}" not in self.log.with_suffix(".out").read_text():
            assert self.process.poll() is None, said(self.log)
            assert time.monotonic() < deadline, f"no banner after {START_S:g} s: {said(self.log)}"
            time.sleep(0.05)

    def start(self) -> None:
        self.spawn()
        self.wait_serving()

    def signal(self, sig: signal.Signals) -> None:
        assert self.process is not None
        self.process.send_signal(sig)

    def exited(self, within: float) -> int:
        """Its exit code, once it has stopped of itself (within `within` seconds)."""
        assert self.process is not None
        return self.process.wait(within)

    def stop(self) -> int:
        """Stop it as an operator does (SIGTERM), or kill it if it does not stop; its exit code."""
        if self.process is None:
            return 0
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
        return self.process.wait()


@contextmanager
def started(servers: Sequence[Server]) -> Generator[Sequence[Server]]:
    """The servers started together, and stopped at the end."""
    try:
        for server in servers:
            server.spawn()
        for server in servers:
            server.wait_serving()
        yield servers
    finally:
        for server in servers:
            server.stop()
