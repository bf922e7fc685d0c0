"""YAML text → plain values, remembering the line of every key and item.

PyYAML's composer gives nodes with marks; we build plain dicts/lists from them ourselves so that
we can (a) record where each YAML path lives, (b) refuse duplicate keys, which PyYAML silently
overwrites, and (c) turn every parse failure into a located `Problem` instead of an exception.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from yao_agent.errors import Problem

Path = tuple[str | int, ...]

_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
MAX_DEPTH = 64  # far beyond any app file, far below Python's recursion limit
# Values one file may build. Aliases re-use a node, so a few hundred bytes can stand for billions of
# values (an "alias bomb"); an app file holds a few hundred.
MAX_VALUES = 100_000


def label(path: Path) -> str:
    """A path as shown in a problem: the document itself is `(root)`."""
    return format_path(path) or "(root)"


def format_path(path: Path) -> str:
    """`('mcp', 'servers', 1)` → `mcp.servers[1]`."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


@dataclass
class Document:
    """A parsed YAML file: its value and where each path starts."""

    file: str
    value: Any = None
    lines: dict[Path, int] = field(default_factory=dict[Path, int])
    # Literal block scalars (`|`) keep their lines: line n of the value is line n after the indicator.
    literal_scalars: set[Path] = field(default_factory=set[Path])
    problems: list[Problem] = field(default_factory=list[Problem])

    def line(self, path: Path) -> int:
        """The line of `path`, or of its nearest located ancestor."""
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return self.lines.get((), 1)

    def problem(self, path: Path, message: str, *, warning: bool = False) -> Problem:
        return Problem(self.file, self.line(path), label(path), message, warning)

    def add(self, path: Path, message: str) -> None:
        self.problems.append(self.problem(path, message))


def decode(file: str, data: bytes) -> tuple[str | None, Problem | None]:
    """Bytes → text, or a problem naming the line of the first byte that is not UTF-8."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        return None, Problem(
            file, line, "", f"file is not valid UTF-8 (byte 0x{data[exc.start]:02x}; expected UTF-8 text)"
        )
    return text.removeprefix("\ufeff"), None


def parse(file: str, text: str) -> Document:
    """Parse one YAML document; every failure becomes a located problem on the result."""
    doc = Document(file)
    try:
        compose: Callable[..., Iterable[Node | None]] = yaml.compose_all  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
        nodes = list(compose(text, Loader=_Loader))
    except yaml.MarkedYAMLError as exc:
        what = exc.problem or exc.context or "malformed YAML"
        doc.problems.append(Problem(file, _error_line(text, exc), "", f"malformed YAML: {what}"))
        return doc
    except yaml.YAMLError as exc:  # reader errors (control characters) carry no mark
        doc.problems.append(Problem(file, _reader_line(text, exc), "", f"malformed YAML: {_reader_reason(exc)}"))
        return doc
    found = [n for n in nodes if n is not None and not _empty(n)]
    if len(found) > 1:
        line = clamp_line(text, _line(found[1]))
        doc.problems.append(Problem(file, line, "", "more than one YAML document (expected exactly one)"))
        return doc
    if found:
        doc.lines[()] = _line(found[0])
        doc.value = _Builder(doc).build(found[0], ())
    return doc


def _empty(node: Node) -> bool:
    """A document with nothing in it, as a stray `---` at the end of a file makes."""
    return isinstance(node, ScalarNode) and node.tag == "tag:yaml.org,2002:null" and node.value == ""


def _error_line(text: str, exc: yaml.MarkedYAMLError) -> int:
    """The line to show for a YAML syntax error: where the author went wrong, within the file."""
    mark = exc.problem_mark or exc.context_mark
    # "could not find expected ':'" is noticed lines later; the key that lacks its colon is the context
    if exc.context_mark is not None and "simple key" in (exc.context or ""):
        mark = exc.context_mark
    return clamp_line(text, mark.line + 1 if mark is not None else 1)


def clamp_line(text: str, line: int) -> int:
    """A line within the file: libyaml may point one past the end of a file without a final newline."""
    return max(1, min(line, text.count("\n") + (0 if text.endswith("\n") else 1)))


def _line(node: Node) -> int:
    mark: Any = node.start_mark
    return int(mark.line) + 1


def _reader_line(text: str, exc: yaml.YAMLError) -> int:
    position = getattr(exc, "position", None)
    return text[:position].count("\n") + 1 if isinstance(position, int) else 1


def _reader_reason(exc: yaml.YAMLError) -> str:
    character = getattr(exc, "character", None)
    if isinstance(character, str | int):
        code = character if isinstance(character, int) else ord(character)
        return f"character U+{code:04X} is not allowed in YAML (expected printable text)"
    return str(exc).splitlines()[0]


class _Builder:
    def __init__(self, doc: Document) -> None:
        self.doc = doc
        self.active: set[int] = set()  # node ids on the current branch, to stop alias cycles
        self.built = 0  # values built so far, to stop alias bombs
        self.construct: Callable[..., Any] = SafeConstructor().construct_object  # pyright: ignore[reportUnknownMemberType]

    def build(self, node: Node, path: Path) -> Any:
        if len(path) > MAX_DEPTH:
            self.doc.problems.append(self.doc.problem(path, f"nested deeper than {MAX_DEPTH} levels (expected less)"))
            return None
        if id(node) in self.active:
            self.doc.problems.append(self.doc.problem(path, "recursive YAML alias (expected a finite value)"))
            return None
        self.built += 1
        if self.built > MAX_VALUES:
            if self.built == MAX_VALUES + 1:
                message = f"the file expands to more than {MAX_VALUES:,} values (YAML aliases repeated too often?)"
                self.doc.problems.append(self.doc.problem(path[:1], message))  # where the top-level value starts
            return None
        self.active.add(id(node))
        try:
            if isinstance(node, MappingNode):
                return self._mapping(node, path)
            if isinstance(node, SequenceNode):
                return self._sequence(node, path)
            return self._scalar(node, path)
        finally:
            self.active.discard(id(node))

    def _mapping(self, node: MappingNode, path: Path) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            line = key_node.start_mark.line + 1
            if key_node.tag == "tag:yaml.org,2002:merge":
                self.doc.problems.append(
                    Problem(self.doc.file, line, label(path), "YAML merge keys (<<) are not supported")
                )
                continue
            key = self._key(key_node, path)
            if key is None:
                continue
            child = (*path, key)
            if key in out:
                first = self.doc.lines.get(child, line)
                self.doc.problems.append(
                    Problem(
                        self.doc.file,
                        line,
                        format_path(child),
                        f"duplicate key '{key}' (first set on line {first})",
                    )
                )
                continue
            self.doc.lines[child] = line
            out[key] = self.build(value_node, child)
        return out

    def _key(self, node: Node, path: Path) -> str | None:
        if isinstance(node, ScalarNode) and node.tag == "tag:yaml.org,2002:str":
            return str(node.value)
        if isinstance(node, ScalarNode):
            return str(self._scalar(node, path))  # `1: x` or `true: x` — keys are names; keep their text
        self.doc.problems.append(
            Problem(self.doc.file, node.start_mark.line + 1, label(path), "a mapping key must be plain text")
        )
        return None

    def _sequence(self, node: SequenceNode, path: Path) -> list[Any]:
        out: list[Any] = []
        for index, item in enumerate(node.value):
            child = (*path, index)
            self.doc.lines[child] = item.start_mark.line + 1
            out.append(self.build(item, child))
        return out

    def _scalar(self, node: Node, path: Path) -> Any:
        if isinstance(node, ScalarNode) and node.style == "|":
            self.doc.literal_scalars.add(path)
        try:
            return self.construct(node, deep=True)
        except ConstructorError as exc:
            self.doc.problems.append(self.doc.problem(path, f"unsupported YAML value: {exc.problem}"))
        except (ValueError, OverflowError, LookupError, AttributeError) as exc:  # e.g. !!bool x, !!int with no digits
            self.doc.problems.append(self.doc.problem(path, f"unreadable YAML value: {exc}"))
        return None
