"""Configuration resolved in one place: a command-line flag, else the environment, else the app's files.

Every variable the process reads from its environment is named here once, with what it sets; the
documentation's configuration reference is built from `VARIABLES`. (Model keys and URLs are not here:
an app's own YAML names them as `$ENV.NAME`.)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from yao_agent.dsl.specs import App

APP = "YAO_AGENT_APP"
DB = "YAO_AGENT_DB"
LOG_FORMAT = "YAO_AGENT_LOG_FORMAT"
HOOK_WORKERS = "YAO_AGENT_HOOK_WORKERS"
METRICS_TOKEN = "YAO_AGENT_METRICS_TOKEN"
DEBUG = "YAO_AGENT_DEBUG"
METRICS_FOLDER = "PROMETHEUS_MULTIPROC_DIR"
LEASE_TTL = "YAO_AGENT_LEASE_TTL_S"

VARIABLES: Mapping[str, str] = {
    APP: "the app folder, when `--app` is not given (default: the current folder)",
    DB: "the store's SQLAlchemy URL, when `--db` is not given (default: app.yml's `store`)",
    LOG_FORMAT: "`text` or `json`, when `serve --log-format` is not given (default: text)",
    HOOK_WORKERS: "how many processes run hooks (default: one per core, 2 to 4)",
    METRICS_TOKEN: "the bearer token `/metrics` asks for (default: none; it takes no user token)",
    DEBUG: "`1` shows the traceback of an internal error (default: one line)",
    LEASE_TTL: "seconds a chat's lease lives without renewal, across processes sharing PostgreSQL (default: 15)",
    METRICS_FOLDER: "where `serve --workers N` keeps its workers' metrics (default: a temporary folder)",
}


def app_dir(flag: str | Path | None, environ: Mapping[str, str] | None = None) -> Path:
    """The app folder: `--app`, else $YAO_AGENT_APP, else the current folder."""
    env = os.environ if environ is None else environ
    return Path(flag or env.get(APP) or ".")


def store(flag: str | None, app: App, environ: Mapping[str, str] | None = None) -> str:
    """The store's URL as written: `--db`, else $YAO_AGENT_DB, else app.yml's `store` (a relative SQLite
    path in it is relative to the app folder: `store.store_url` resolves it)."""
    env = os.environ if environ is None else environ
    return flag or env.get(DB) or app.config.store


def debug(environ: Mapping[str, str] | None = None) -> bool:
    return (os.environ if environ is None else environ).get(DEBUG) == "1"


def lease_ttl_s(default: float, environ: Mapping[str, str] | None = None) -> float:
    """How long a dead process holds a chat's lease: $YAO_AGENT_LEASE_TTL_S, else `default`."""
    raw = (os.environ if environ is None else environ).get(LEASE_TTL)
    return float(raw) if raw else default
