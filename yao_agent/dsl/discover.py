"""Find an app's files and derive their ids from their paths."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from yao_agent.errors import Problem

ID_SEGMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
ID_RULE = "letters, digits, '_' and '-', starting with a letter or digit"
YAML_SUFFIXES = (".yml", ".yaml")


@dataclass(frozen=True, slots=True)
class Found:
    kind: str  # app | assistant | connector | mcp | knowledge | eval
    id: str
    path: Path
    rel: str  # as shown to the author: relative to the app root, with '/'


@dataclass
class Discovery:
    files: list[Found] = field(default_factory=list[Found])
    problems: list[Problem] = field(default_factory=list[Problem])


def discover(root: Path) -> Discovery:
    out = Discovery()
    app_files = _variants(root, "app", out)
    if app_files:
        out.files.append(Found("app", "app", app_files, _rel(root, app_files)))
    _connectors(root, out)
    _assistants(root, out)
    _mcps(root, out)
    _knowledge(root, out)
    _evals(root, out)
    return out


def _rel(root: Path, path: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()


def _variants(folder: Path, stem: str, out: Discovery) -> Path | None:
    """`stem.yml` or `stem.yaml`; both at once is an error (which one would win is a guess)."""
    present = [folder / f"{stem}{s}" for s in YAML_SUFFIXES if (folder / f"{stem}{s}").is_file()]
    if len(present) > 1:
        out.problems.append(
            Problem(
                present[1].name,
                0,
                "",
                f"two variants: {present[0].name} and {present[1].name} (expected one)",
            )
        )
    return present[0] if present else None


def _walk(root: Path, top: Path, out: Discovery) -> list[tuple[Path, list[str]]]:
    """(folder, file names) for every folder under `top`, following symlinks but never in a circle."""
    found: list[tuple[Path, list[str]]] = []
    seen: set[str] = set()
    if not top.is_dir():
        return found

    def unreadable(exc: OSError) -> None:
        where = _rel(root, Path(exc.filename)) if exc.filename else _rel(root, top)
        out.problems.append(Problem(where, 0, "", f"cannot read folder: {exc.strerror} (expected a readable folder)"))

    for folder, dirs, files in os.walk(top, followlinks=True, onerror=unreadable):
        real = os.path.realpath(folder)
        if real in seen:
            out.problems.append(
                Problem(
                    _rel(root, Path(folder)),
                    0,
                    "",
                    "symlink loop: this folder is reached twice (expected a tree)",
                )
            )
            dirs.clear()
            continue
        seen.add(real)
        dirs.sort()
        found.append((Path(folder), sorted(files)))
    return found


def _check_id(root: Path, path: Path, parts: list[str], out: Discovery) -> str | None:
    bad = [p for p in parts if not ID_SEGMENT.match(p)]
    if bad:
        out.problems.append(
            Problem(_rel(root, path), 0, "", f"'{bad[0]}' cannot be part of an id (expected {ID_RULE})")
        )
        return None
    return ".".join(parts)


def _add(out: Discovery, ids: dict[str, Found], found: Found) -> None:
    if found.id in ids:
        first = ids[found.id]
        out.problems.append(
            Problem(found.rel, 0, "", f"duplicate {found.kind} id '{found.id}' (also defined by {first.rel})")
        )
        return
    ids[found.id] = found
    out.files.append(found)


def _connectors(root: Path, out: Discovery) -> None:
    top = root / "connectors"
    ids: dict[str, Found] = {}
    for folder, files in _walk(root, top, out):
        for name in files:
            path = folder / name
            if path.suffix not in YAML_SUFFIXES:
                continue
            parts = [*path.relative_to(top).parent.parts, *path.stem.split(".")]
            connector_id = _check_id(root, path, parts, out)
            if connector_id is not None:
                _add(out, ids, Found("connector", connector_id, path, _rel(root, path)))


def _assistants(root: Path, out: Discovery) -> None:
    top = root / "assistants"
    ids: dict[str, Found] = {}
    for folder, files in _walk(root, top, out):
        names = [n for n in files if n in ("assistant.yml", "assistant.yaml")]
        if not names:
            continue
        if len(names) > 1:
            out.problems.append(
                Problem(
                    _rel(root, folder / names[1]),
                    0,
                    "",
                    "two variants: assistant.yaml and assistant.yml (expected one)",
                )
            )
        path = folder / ("assistant.yml" if "assistant.yml" in names else "assistant.yaml")
        parts = list(folder.relative_to(top).parts)
        if not parts:
            out.problems.append(
                Problem(
                    _rel(root, path),
                    0,
                    "",
                    "an assistant needs its own folder (expected assistants/<name>/assistant.yml)",
                )
            )
            continue
        assistant_id = _check_id(root, path, parts, out)
        if assistant_id is not None:
            _add(out, ids, Found("assistant", assistant_id, path, _rel(root, path)))


def _mcps(root: Path, out: Discovery) -> None:
    top = root / "mcps"
    if not top.is_dir():
        return
    ids: dict[str, Found] = {}
    for path in sorted(top.iterdir()):
        if path.suffix not in YAML_SUFFIXES or not path.is_file():
            continue
        parts = path.stem.split(".")
        server_id = _check_id(root, path, parts, out)
        if server_id is not None:
            _add(out, ids, Found("mcp", server_id, path, _rel(root, path)))


def _knowledge(root: Path, out: Discovery) -> None:
    """`knowledge/<path>.yml`, id `<path>` with '/' → '.'. Other files there (a collection's sources,
    often kept beside it) are not app files."""
    _yaml_tree(root, out, "knowledge", root / "knowledge")


def _yaml_tree(root: Path, out: Discovery, kind: str, top: Path) -> None:
    """Every YAML file under `top` is one of `kind`, its id its path there with '/' → '.'."""
    ids: dict[str, Found] = {}
    for folder, files in _walk(root, top, out):
        for name in files:
            path = folder / name
            if path.suffix not in YAML_SUFFIXES:
                continue
            parts = [*path.relative_to(top).parent.parts, path.stem]
            found_id = _check_id(root, path, parts, out)
            if found_id is not None:
                _add(out, ids, Found(kind, found_id, path, _rel(root, path)))


def _evals(root: Path, out: Discovery) -> None:
    """`evals/<path>.yml`, id `<path>` with '/' → '.'; other files there are not app files."""
    _yaml_tree(root, out, "eval", root / "evals")
