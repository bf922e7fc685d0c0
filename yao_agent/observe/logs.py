"""The server's log: `text` (as it always was) or `json` (one object a line, for a log shipper to index).

A JSON line has `ts` (ISO 8601, UTC), `level`, `msg`, `logger` and, where known, the ids of the run
it belongs to. Those ids live in a context variable that `ids.bind_run` sets when a run starts: each run is
its own asyncio task, and a task starts from a copy of its creator's context, so everything the run
logs — its stages, hooks and tools, and the tasks they start — carries them without any call
passing them on, and nothing outside the run does.

No secret reaches a line: `msg`, every string an `extra=` gives and a traceback go through
`redact` here as well, whatever was or was not noted when the record was made.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import sys
import traceback
from collections.abc import Generator
from datetime import UTC, datetime
from typing import Any, Literal, TextIO, cast

from yao_agent import settings
from yao_agent.base.redact import redact
from yao_agent.errors import UsageError
from yao_agent.ids import run_ids

Format = Literal["text", "json"]
FORMATS: tuple[Format, ...] = ("text", "json")
ENV = settings.LOG_FORMAT
RUN_FIELDS = ("run_id", "chat_id", "trace_id", "team_id", "user_id", "assistant_id")
MAX_DEPTH = 4  # how deep an extra's lists and dicts are kept; below that, a value is shown as text

# What every record has without `extra=`: the rest of a record's attributes are the extras.
_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}
_format: Format = "text"


def chosen(flag: str | None) -> Format:
    """The format a flag asks for, or else `$YAO_AGENT_LOG_FORMAT`, or else text."""
    value = (flag or os.environ.get(ENV) or "text").strip().lower()
    if value not in FORMATS:
        raise UsageError(f"unknown log format {value!r} (from --log-format or {ENV}): expected json or text")
    return value


def current_format() -> Format:
    return _format


@contextlib.contextmanager
def configured(fmt: Format, stream: TextIO | None = None) -> Generator[logging.Handler]:
    """While serving, the log goes to `stream` (stderr) in `fmt`: our loggers from INFO (the access
    lines, the hooks' ctx.log), other libraries from WARNING, as before. Undone at the end, so a
    command run in-process (a test) leaves logging as it found it."""
    global _format
    before = _format, logging.getLogger("yao_agent").level
    _format = fmt
    handler = logging.StreamHandler(stream or sys.stderr)
    # text keeps the lines Python printed before any handler existed: the message, then a traceback
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter())
    root = logging.getLogger()
    root.addHandler(handler)
    logging.getLogger("yao_agent").setLevel(logging.INFO)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        _format = before[0]
        logging.getLogger("yao_agent").setLevel(before[1])


def uvicorn_log_config() -> dict[str, Any] | None:
    """uvicorn's own logging setup: its default in text; none in JSON, so its lines (an error in the
    app, say) reach our handler and come out as JSON like the rest."""
    if _format == "json":
        return None
    from uvicorn.config import LOGGING_CONFIG

    return LOGGING_CONFIG


class JsonFormatter(logging.Formatter):
    """A record as one JSON object on one line, with the run's ids and the record's JSON-safe extras."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = dict(run_ids())
        for name, value in record.__dict__.items():
            if name not in _STANDARD and not name.startswith("_"):
                safe = _json_safe(value, MAX_DEPTH)
                if safe is not _UNSAFE:
                    line[name] = safe
        stamp = datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
        line.update(ts=stamp.replace("+00:00", "Z"), level=record.levelname.lower(),
                    msg=redact(record.getMessage()), logger=record.name)  # fmt: skip
        problem = _traceback(record)
        if problem:
            line["exc"] = problem
        return json.dumps(line, ensure_ascii=False, separators=(",", ":"))


def _traceback(record: logging.LogRecord) -> str:
    """The record's traceback and stack, redacted (`exc_text` may hold one redacted when it was made)."""
    text = record.exc_text or ""
    if not text and record.exc_info and record.exc_info[1] is not None:
        text = "".join(traceback.format_exception(record.exc_info[1])).rstrip("\n")
    if record.stack_info:
        text = f"{text}\n{record.stack_info}" if text else record.stack_info
    return redact(text) if text else ""


_UNSAFE = object()  # what `_json_safe` gives for a value with no JSON form


def _json_safe(value: Any, depth: int) -> Any:
    """`value` as JSON can hold it, every string redacted; `_UNSAFE` when it has no JSON form."""
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else _UNSAFE
    if isinstance(value, str):
        return redact(value)
    if depth <= 0 or not isinstance(value, list | tuple | dict):
        return _UNSAFE
    if isinstance(value, dict):
        items = cast(dict[Any, Any], value).items()
        pairs = {str(k): _json_safe(v, depth - 1) for k, v in items if isinstance(k, str)}
        return {k: v for k, v in pairs.items() if v is not _UNSAFE}
    kept = [_json_safe(item, depth - 1) for item in cast(list[Any] | tuple[Any, ...], value)]
    return [item for item in kept if item is not _UNSAFE]


__all__ = ["ENV", "FORMATS", "RUN_FIELDS", "Format", "JsonFormatter", "chosen", "configured",
           "uvicorn_log_config"]  # fmt: skip
