"""`guardrails:` of app.yml and of an assistant (CONTRACT §9.5): built into `Guardrails`, and checked.

Beyond the schema: a check has exactly one kind; `mask` is for what can be masked (`pii`, `deny`); a deny
pattern must be one RE2 runs (linear time, whatever the text); a JSON Schema must be usable; a
classifier's `with` must name a connector or role that can chat; a hook file must exist.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from yao_agent.base import safe_regex, structured
from yao_agent.errors import Problem

from .checks import items, mapping
from .refs import Known, chat_target, connector_ref
from .source import Document
from .source import Path as YamlPath
from .specs import GUARD_KINDS, GUARD_STAGES, Classifier, GuardAction, GuardCheck, GuardKind, Guardrails

MASKABLE = ("pii", "deny")
DEFAULT_ACTION: dict[GuardKind, GuardAction] = {"pii": "mask"}  # every other kind blocks unless told


def build_guardrails(doc: Document, data: object, root: Path) -> Guardrails:
    """The `guardrails:` block of a valid document (an empty one when it has none)."""
    given = mapping(data)
    stages = {stage: tuple(_check(doc, (stage, n), mapping(c), root) for n, c in items(given.get(stage)))
              for stage in GUARD_STAGES}  # fmt: skip
    return Guardrails(**stages, on_error=given.get("on_error"), hold_back_chars=given.get("hold_back_chars"))


def _check(doc: Document, at: YamlPath, data: Mapping[str, Any], root: Path) -> GuardCheck:
    kind: GuardKind = next(k for k in GUARD_KINDS if k in data)
    action: GuardAction = data.get("action", DEFAULT_ACTION.get(kind, "block"))
    line = doc.line(("guardrails", *at))
    if kind == "pii":
        return GuardCheck(kind, action, doc.file, line, pii=tuple(cast(list[str], data["pii"])))
    if kind == "deny":
        return GuardCheck(kind, action, doc.file, line, deny=tuple(cast(list[str], data["deny"])))
    if kind == "max_chars":
        return GuardCheck(kind, action, doc.file, line, max_chars=int(data["max_chars"]))
    if kind == "json_schema":
        return GuardCheck(kind, action, doc.file, line, schema=dict(cast(Mapping[str, Any], data["json_schema"])))
    if kind == "classifier":
        given = cast(Mapping[str, Any], data["classifier"])
        classifier = Classifier(str(given["with"]), str(given["prompt"]), float(given.get("timeout_s", 10)))
        return GuardCheck(kind, action, doc.file, line, classifier=classifier)
    hook = str(data["hook"])
    return GuardCheck(kind, action, doc.file, line, hook=hook, hook_path=root / hook)


def check_guardrails(doc: Document, root: Path, known: Known) -> list[Problem]:
    """What the schema cannot say of a document's `guardrails:`."""
    problems: list[Problem] = []
    given = mapping(mapping(doc.value).get("guardrails"))
    for stage in GUARD_STAGES:
        for number, check in items(given.get(stage)):
            problems += _check_problems(doc, ("guardrails", stage, number), mapping(check), root, known)
    return problems


def _check_problems(doc: Document, at: YamlPath, data: Mapping[str, Any], root: Path, known: Known) -> list[Problem]:
    kinds = [k for k in GUARD_KINDS if k in data]
    if len(kinds) != 1:
        said = "has none" if not kinds else f"has {len(kinds)}: {', '.join(kinds)}"
        return [doc.problem(at, f"a guardrail is exactly one check of {', '.join(GUARD_KINDS)} ({said})")]
    kind = kinds[0]
    if data.get("action") == "mask" and kind not in MASKABLE:
        said = f"a {kind} check cannot mask (expected action: block; mask is for pii and deny)"
        return [doc.problem((*at, "action"), said)]
    if kind == "deny":
        return [doc.problem((*at, "deny", n), why) for n, pattern in items(data["deny"])
                if isinstance(pattern, str) and (why := safe_regex.problem(pattern)) is not None]  # fmt: skip
    if kind == "json_schema" and isinstance(data["json_schema"], dict):
        found = structured.schema_problems(cast(Mapping[str, Any], data["json_schema"]))
        return [doc.problem((*at, "json_schema", *found[0][0]), found[0][1])] if found else []
    if kind == "classifier":
        ref = mapping(data["classifier"]).get("with")
        path = (*at, "classifier", "with")
        return connector_ref(doc, ref, known, path) + chat_target(doc, ref, known, path)
    if kind == "hook" and isinstance(data["hook"], str) and not _hook_file(root, data["hook"]):
        return [doc.problem((*at, "hook"), f"no hook file {data['hook']!r} in the app (expected a .js or .ts file)")]
    return []


def _hook_file(root: Path, given: str) -> bool:
    """Whether `given` names a file under the app (a path the system refuses names none)."""
    try:
        path = (root / given).resolve()
        return path.is_relative_to(root.resolve()) and path.is_file()
    except (OSError, RuntimeError, ValueError):  # a NUL in it, a name too long, a symlink loop
        return False
