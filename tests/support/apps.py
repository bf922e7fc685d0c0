"""Build small apps on disk for tests: `make_app(tmp_path, {"app.yml": "...", ...})`."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from pathlib import Path

from yao_agent.dsl import check_app

MINIMAL = {
    "app.yml": "roles:\n  default: demo.echo\n",
    "connectors/demo/echo.yml": "type: scripted\nrules:\n  - reply: 'You said: {{ last_user }}'\n",
    "assistants/chat/assistant.yml": "name: Chat\n",
}


def make_app(root: Path, files: Mapping[str, str | bytes | None], *, base: Mapping[str, str] | None = None) -> Path:
    """Write `base` (default: a minimal valid app) overlaid with `files`; None deletes a base file."""
    merged: dict[str, str | bytes | None] = {**(MINIMAL if base is None else base), **files}
    for rel, content in merged.items():
        if content is None:
            continue
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(textwrap.dedent(content), encoding="utf-8")
    return root


def errors(root: Path) -> list[str]:
    return [str(p) for p in check_app(root).errors]


def warnings(root: Path) -> list[str]:
    return [str(p) for p in check_app(root).warnings]
