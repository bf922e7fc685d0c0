"""The deploy recipes the deploying guide explains hold together: the systemd unit passes
`systemd-analyze verify`, the Dockerfile copies what the repository has and starts a command yao-agent
takes, and the compose file and the environment file set only variables something reads. (No Docker
engine runs here: the image is never built, the compose file never started.)"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.docs import DOCS, REPO
from yao_agent.cli import build_parser

DEPLOY = DOCS / "deploy"
VENV_SCRIPT = "/srv/yao-agent/venv/bin/yao-agent"


def instructions(dockerfile: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per instruction: continuation lines joined, comments left out."""
    kept = [line for line in dockerfile.splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n\s*", " ", "\n".join(kept))
    return [(line.split()[0].upper(), line.split(None, 1)[1]) for line in joined.splitlines() if line.strip()]


def read_by_the_code() -> set[str]:
    """The environment variables the package reads, and those the example app names with $ENV."""
    code = "".join(p.read_text("utf-8") for p in (REPO / "yao_agent").rglob("*.py"))
    app = "".join(p.read_text("utf-8") for p in REPO.glob("connectors/**/*.yml"))
    return set(re.findall(r"\b(YAO_AGENT_[A-Z_]+|OTEL_[A-Z_]+)\b", code)) | set(re.findall(r"\$ENV\.(\w+)", app))


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed here")
def test_the_systemd_unit_verifies_without_a_word(tmp_path: Path) -> None:
    unit = (DEPLOY / "yao-agent.service").read_text("utf-8")
    assert VENV_SCRIPT in unit
    # verify checks that ExecStart's program exists: point it at this checkout's, nothing else changed.
    here = tmp_path / "yao-agent.service"
    here.write_text(unit.replace(VENV_SCRIPT, str(Path(sys.executable).parent / "yao-agent")))
    done = subprocess.run(["systemd-analyze", "verify", str(here)], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout + done.stderr) == (0, "")


def test_the_unit_starts_a_command_yao_agent_takes_and_drains_before_it_is_killed() -> None:
    unit = (DEPLOY / "yao-agent.service").read_text("utf-8")
    settings = dict(re.findall(r"^(\w+)=(.*)$", unit, re.M))
    command = settings["ExecStart"].split()
    assert command[0] == VENV_SCRIPT
    args = build_parser().parse_args(command[1:])
    assert settings["KillMode"] == "mixed" and int(settings["TimeoutStopSec"]) > args.drain_s
    assert "MemoryDenyWriteExecute" not in settings  # V8 cannot run under it


def test_the_dockerfile_copies_what_the_repository_has_and_starts_yao_agent() -> None:
    steps = instructions((DEPLOY / "Dockerfile").read_text("utf-8"))
    assert steps[0][0] == "FROM"
    copies = [args.split()[:-1] for name, args in steps if name == "COPY"]
    assert copies and [s for sources in copies for s in sources if not (REPO / s).exists()] == []
    command = json.loads(next(args for name, args in steps if name == "CMD"))
    assert command[0] == "yao-agent"
    build_parser().parse_args(command[1:])  # (a mistake exits)
    assert ("USER", "yao-agent") in steps


def test_the_compose_file_runs_yao_agent_on_postgresql_with_variables_the_code_reads() -> None:
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text("utf-8"))
    server, db = compose["services"]["yao-agent"], compose["services"]["db"]
    assert (REPO / "docs" / "deploy" / server["build"]["context"] / server["build"]["dockerfile"]).is_file()
    assert db["image"].startswith("postgres:") and server["depends_on"]["db"]["condition"] == "service_healthy"
    env = server["environment"]
    assert env["YAO_AGENT_DB"].startswith("postgresql+psycopg://") and "@db:5432/" in env["YAO_AGENT_DB"]
    assert set(env) - read_by_the_code() == set()
    assert int(server["stop_grace_period"].removesuffix("s")) > 30  # longer than the default --drain-s


def test_the_environment_file_sets_only_variables_the_code_reads() -> None:
    lines = (DEPLOY / "yao-agent.env").read_text("utf-8").splitlines()
    names = {line.split("=", 1)[0].lstrip("# ") for line in lines if re.match(r"^#? ?[A-Z_]+=", line)}
    assert "YAO_AGENT_DB" in names and names - read_by_the_code() == set()
