"""Load an app folder: find its files, parse them, check them against their schemas and each other.

Every problem in every file is collected before anything is reported, so an author fixes all of
them in one round. Only `SpecError` leaves this module for anything wrong with the files.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import cast

from yao_agent.base.files import NotRegular, TooLarge, read_regular
from yao_agent.errors import Problem, SpecError, UsageError

from . import build, checks, evals, guardrails, knowledge, refs
from .discover import Found, discover
from .schema import coerce_integers, load_schema, validate
from .source import Document, decode, parse
from .specs import LOCAL_TYPE, App, AppConfig, HookSource

# A check that runs the app's code (hooks, MCP servers), given the files as read (the YAML documents, and
# each hook file's text by its path): see yao_agent/service/probe.py.
Probe = Callable[[Path, Mapping[Found, Document], Mapping[Path, str]], list[Problem]]

# Files larger than this are not app files; reading them would only hide the real mistake.
MAX_FILE_BYTES = 1 << 20


@dataclass
class Report:
    """The outcome of checking an app: the app when it is valid, and every problem found."""

    app: App | None
    errors: list[Problem] = field(default_factory=list[Problem])
    warnings: list[Problem] = field(default_factory=list[Problem])


def load_app(root: str | Path) -> App:
    """Load and validate the app at `root`; raise `SpecError` listing every problem."""
    report = check_app(root)
    if report.app is None:
        raise SpecError(report.errors)
    return report.app


def check_app(root: str | Path, *, probe: Probe | None = None) -> Report:
    """Every problem of the app at `root`, and the app when there is none.

    `probe` also checks what only running the app's code can tell, given the files as read (the CLI's
    `validate` passes `yao_agent.service.probe`'s: hooks loaded in V8, MCP servers asked for their tools).
    """
    folder = Path(root)
    if not folder.is_dir():
        raise UsageError(f"no app folder at {folder} (expected a folder with app.yml, assistants/, connectors/)")
    if not any((folder / name).exists() for name in ("app.yml", "app.yaml", "assistants", "connectors")):
        raise UsageError(f"no app at {folder} (expected app.yml, assistants/ or connectors/ there; see --app)")
    found = discover(folder)
    problems = list(found.problems)
    docs: dict[Found, Document] = {}
    read: dict[str, bytes] = {}
    for item in found.files:
        doc = _read(item, read)
        _validate(item, doc)
        problems += doc.problems
        docs[item] = doc
    hooks: dict[Path, str] = {}  # each hook file's text, read once: checked, hashed and served as read
    problems += _cross_references(folder, docs, hooks)
    if probe is not None:
        problems += probe(folder, docs, hooks)
    errors = sorted((p for p in problems if not p.warning), key=_order)
    warnings = sorted((p for p in problems if p.warning), key=_order)
    if errors:
        return Report(None, errors, warnings)
    app = _with_hooks(_build(folder, docs, warnings), hooks)
    return Report(replace(app, version=version(read, app)), errors, warnings)


def version(read: Mapping[str, bytes], app: App) -> str:
    """A short hash of the app's YAML files and hooks as read: two loads of the same files agree on it,
    whichever process made them, and any change to a file changes it."""
    digest = hashlib.sha256()
    hooks = {
        str(a.hook_path.relative_to(app.root)): a.hook_source.text.encode()
        for a in app.assistants.values()
        if a.hook_path is not None and a.hook_source is not None
    }
    for name, data in sorted([*read.items(), *hooks.items()]):
        digest.update(f"{name}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()[:12]


def _with_hooks(app: App, hooks: Mapping[Path, str]) -> App:
    """Each assistant with its hook file's text as read: what runs of this version compile."""
    sources = {path: HookSource.of(text) for path, text in hooks.items()}
    assistants = {
        key: replace(spec, hook_source=sources.get(spec.hook_path)) if spec.hook_path is not None else spec
        for key, spec in app.assistants.items()
    }
    return replace(app, assistants=assistants)


def _order(problem: Problem) -> tuple[str, int, str]:
    return (problem.file, problem.line, problem.path)


def _read(item: Found, read: dict[str, bytes]) -> Document:
    doc = Document(item.rel)
    try:
        data = read_regular(item.path, MAX_FILE_BYTES)
        read[item.rel] = data
    except TooLarge as exc:
        doc.problems.append(Problem(item.rel, 0, "", f"file is {exc.size} bytes (expected at most {MAX_FILE_BYTES})"))
        return doc
    except NotRegular:
        doc.problems.append(Problem(item.rel, 0, "", "not a regular file (expected a YAML file)"))
        return doc
    except OSError as exc:
        doc.problems.append(
            Problem(item.rel, 0, "", f"cannot read file: {exc.strerror or exc} (expected a readable file)")
        )
        return doc
    text, problem = decode(item.rel, data)
    if problem is not None or text is None:
        doc.problems.append(problem or Problem(item.rel, 0, "", "unreadable file"))
        return doc
    parsed = parse(item.rel, text)
    if parsed.value is None and not parsed.problems and item.kind != "app":
        parsed.problems.append(
            Problem(item.rel, 1, "", f"file is empty (expected a mapping describing the {item.kind})")
        )
    return parsed


def _validate(item: Found, doc: Document) -> None:
    if doc.problems:
        return
    if doc.value is None:  # an empty app.yml means "all defaults"
        doc.value = {}
    schema = load_schema(item.kind)
    for path, message in validate(doc.value, schema):
        doc.add(path, message)
    checks.check_file(item.kind, doc)
    if not doc.problems:
        coerce_integers(doc.value, schema)


def _known(docs: dict[Found, Document]) -> refs.Known:
    app_doc = next((d for f, d in docs.items() if f.kind == "app"), None)
    roles = checks.mapping(checks.mapping(app_doc.value if app_doc else None).get("roles"))
    local = frozenset(f.id for f, d in docs.items() if f.kind == "connector" and _typed(d) == LOCAL_TYPE)
    return refs.Known(
        connectors=frozenset(f.id for f in docs if f.kind == "connector"),
        mcps=frozenset(f.id for f in docs if f.kind == "mcp"),
        roles=frozenset(roles),
        knowledge=frozenset(f.id for f in docs if f.kind == "knowledge"),
        assistants=frozenset(f.id for f in docs if f.kind == "assistant"),
        local=local,
        local_in_roles={role: named for role, chain in roles.items() if (named := _local_in(chain, local))},
    )


def _typed(doc: Document) -> object:
    return checks.mapping(doc.value).get("type")


def _local_in(chain: object, local: frozenset[str]) -> str | None:
    """The first `type: local` connector a role's chain (one id, or a list of them) names."""
    names = cast(list[object], chain) if isinstance(chain, list) else [chain]
    return next((name for name in names if isinstance(name, str) and name in local), None)


def _cross_references(root: Path, docs: dict[Found, Document], hooks: dict[Path, str]) -> list[Problem]:
    known = _known(docs)
    app_doc = next((d for f, d in docs.items() if f.kind == "app"), None)
    problems = refs.check_roles(app_doc, known)
    for item, doc in docs.items():
        if item.kind in ("app", "assistant"):
            problems += guardrails.check_guardrails(doc, root, known)
        if item.kind == "assistant":
            problems += refs.check_assistant(doc, root, known, hooks)
            problems += knowledge.check_search(doc, known)
        elif item.kind == "knowledge":
            problems += knowledge.check_collection(doc, root, known)
        elif item.kind == "eval":
            problems += evals.check_eval(doc, known)
    problems += refs.check_mcp_prefixes({f.id: f.rel for f in docs if f.kind == "mcp"})
    return problems


def _build(root: Path, docs: dict[Found, Document], warnings: list[Problem]) -> App:
    """Typed specs of an app whose every file is valid."""
    app_doc = next((d for f, d in docs.items() if f.kind == "app"), None)
    by_kind: dict[str, dict[str, Document]] = {"connector": {}, "assistant": {}, "mcp": {}, "knowledge": {},
                                               "eval": {}}  # fmt: skip
    for item, doc in docs.items():
        if item.kind in by_kind:
            by_kind[item.kind][item.id] = doc
    return App(
        root=root,
        config=build.build_app_config(app_doc, root) if app_doc is not None else AppConfig(),
        assistants={k: build.build_assistant(k, d, root) for k, d in sorted(by_kind["assistant"].items())},
        connectors={k: build.build_connector(k, d) for k, d in sorted(by_kind["connector"].items())},
        mcps={k: build.build_mcp(k, d, root) for k, d in sorted(by_kind["mcp"].items())},
        knowledge={
            k: knowledge.build_collection(k, d, build.build_access(d.value.get("access")))
            for k, d in sorted(by_kind["knowledge"].items())
        },
        evals={k: evals.build_eval(k, d) for k, d in sorted(by_kind["eval"].items())},
        warnings=tuple(warnings),
    )
