"""Property-based tests of the app loader: whatever is in the files, the author gets located problems.

The example app at the repository root is copied once per test; each hypothesis example rewrites one
of its files, checks the app, and puts the file back. The properties:

* `check_app` returns a `Report` (and `load_app` raises `SpecError`), never any other exception;
* every problem names a real file of the app (relative path), a line inside that file and a message;
* one broken file does not cascade into errors in the others;
* a value of the wrong type is reported at its YAML path and on its line;
* a byte that is not UTF-8 is reported on its line;
* a file that breaks its JSON Schema is never accepted, whether it is a random document or an
  example file with any value at any path.

Bugs found on the way have a test of their own at the end.
"""

from __future__ import annotations

import copy
import re
import shutil
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import jsonschema
import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from yaml.nodes import MappingNode, Node, SequenceNode

from yao_agent.dsl import Report, check_app, load_app
from yao_agent.dsl.schema import load_schema
from yao_agent.errors import Problem, SpecError

REPO = Path(__file__).resolve().parents[2]
APP_PARTS = ("app.yml", "assistants", "connectors", "mcps", "hooks", "knowledge")
HOOK = "hooks/concierge.ts"
HOOKED_ASSISTANT = "assistants/concierge/assistant.yml"


def _kind(rel: str) -> str:
    if rel == "app.yml":
        return "app"
    return {"assistants": "assistant", "connectors": "connector", "mcps": "mcp", "knowledge": "knowledge"}[
        rel.split("/")[0]
    ]


YAML_FILES = sorted(
    p.relative_to(REPO).as_posix()
    for part in APP_PARTS
    for p in ([REPO / part] if part.endswith(".yml") else (REPO / part).rglob("*.yml"))
)
KIND_OF = {rel: _kind(rel) for rel in YAML_FILES}
ORIGINAL = {rel: (REPO / rel).read_text("utf-8") for rel in [*YAML_FILES, HOOK]}
PARSED = {rel: yaml.safe_load(ORIGINAL[rel]) for rel in YAML_FILES}

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# YAML 1.1 (PyYAML, libyaml) and JavaScript break lines on more than '\n'; a located problem may
# count those, so a line "inside the file" is bounded by the largest count an author's tool may show.
_YAML_BREAKS = re.compile("\r\n|[\n\r\x85\u2028\u2029]")
_JS_BREAKS = re.compile("\r\n|[\n\r\u2028\u2029]")


# The loader agrees with JSON Schema itself (which, like editors, counts 3.0 as an integer).
YamlValidator: Any = jsonschema.Draft202012Validator


def schema_valid(kind: str, value: object) -> bool:
    return bool(YamlValidator(load_schema(kind)).is_valid(value))


# --- the example app, copied once per test and restored after every example -------------------------------


@pytest.fixture(scope="module")
def app_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("app")
    for part in APP_PARTS:
        source = REPO / part
        if source.is_dir():
            shutil.copytree(source, root / part)
        else:
            shutil.copy(source, root / part)
    report = check_app(root)
    assert report.app is not None and not report.errors, "the example app itself must be valid"
    return root


@contextmanager
def rewritten(root: Path, rel: str, data: bytes) -> Generator[None]:
    path = root / rel
    before = path.read_bytes()
    path.write_bytes(data)
    try:
        yield
    finally:
        path.write_bytes(before)


def line_count(root: Path, rel: str) -> int:
    text = (root / rel).read_bytes().decode("utf-8", errors="replace")
    breaks = _JS_BREAKS if rel.endswith(".js") else _YAML_BREAKS
    return len(breaks.findall(text)) + 1


def label(path: tuple[str | int, ...]) -> str:
    """A YAML path as problems show it: `mcp.servers[1]`, `(root)` for the document."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out or "(root)"


def _located(root: Path, problem: Problem) -> None:
    assert problem.file, problem
    assert not Path(problem.file).is_absolute(), problem
    assert (root / problem.file).exists(), problem
    assert problem.message.strip(), problem
    # Every file here is readable and small, so every problem is about a place inside a file's text.
    assert problem.line >= 1, problem
    assert problem.line <= line_count(root, problem.file), problem


def checked(root: Path) -> Report:
    """`check_app`, asserting that its report is well formed and every problem located."""
    report = check_app(root)
    assert isinstance(report, Report)
    assert (report.app is None) == bool(report.errors)
    assert all(not p.warning for p in report.errors)
    assert all(p.warning for p in report.warnings)
    for problem in [*report.errors, *report.warnings]:
        _located(root, problem)
    return report


# --- (a) the example files, mutated as text -------------------------------------------------------------

TOKENS = [
    "\x00", "\t", "\ufeff", "\r", "\r\n", "\x85", "\u2028", "\x0c", "\x1b", "\x7f", "\U0001f600", "\u00e9",
    ": ", "- ", "? ", "{", "}", "[", "]", ",", "&a ", "*a", "*b", "!!binary ", "!!python/object:os.system ",
    "!!int ", "!!float ", "!!set ", "!!omap ", "!x ", "<<: ", "<<: *a", "'", '"', "\\", "# ", "| ", "|-\n", "> ",
    "---\n", "...\n", "%YAML 1.1\n", "%TAG ! !x\n", "{{", "}}", "{%", "%}", "{{ nope }}", "{{ x | nosuch }}",
    "{% endif %}", "$ENV.", "use::", "use::nope", "\n", "  ", "@", "`", "0x", ".inf", ".nan", "~", "null", "yes",
    "2001-12-14t21:59:43.10-05:00", "1e400", "9" * 400, "(?P<", "a{4294967296}", "hooks/", ".js",
]  # fmt: skip
INSERTS = st.one_of(st.sampled_from(TOKENS), st.text(max_size=6))
# Written where a value starts, most of these keep the YAML well formed and so reach the later checks.
VALUE_TOKENS = [
    "!!binary ", "!!python/object:os.system ", "!!python/name:os.system ", "!!int ", "!!float ", "!!bool ",
    "!!timestamp ", "!!str ", "!!null ", "!!set ", "!!omap ", "!!pairs ", "!x ", "!<tag:x> ", "&a ", "*a ", "~ ",
    "[] ", "{} ", ".nan ", ".inf ", "-.inf ", "0o7 ", "0x_ ", "1_000 ", "1e400 ", "2001-12-14 ", "yes ", "'' ",
    '"\\ud800" ', '"\\0" ', '"\\x85" ', "{{ nope }} ", "{% if %} ", "use::", "$ENV.", "hooks/", "(",
]  # fmt: skip
VALUE_INSERTS = st.one_of(st.sampled_from(VALUE_TOKENS), st.text(max_size=4))
# Not UTF-8: stray continuation bytes, overlong forms, surrogates (U+D800..U+DFFF), > U+10FFFF, cut-off sequences.
BAD_BYTES = [
    b"\x80", b"\xbf", b"\xfe", b"\xff", b"\xc0\xaf", b"\xc1\xbf", b"\xe0\x80\xaf", b"\xed\xa0\x80", b"\xed\xbf\xbf",
    b"\xf4\x90\x80\x80", b"\xf8\x88\x80\x80\x80", b"\xc3", b"\xe2\x82", b"\xf0\x9f\x98",
]  # fmt: skip


_VALUE_STARTS = re.compile(r"(?<=: )|(?<=- )|(?<=:)$|(?<=\[)|(?<=\{)", re.MULTILINE)


@st.composite
def _edit(draw: st.DrawFn, text: str) -> str:
    size = len(text)
    op = draw(
        st.sampled_from(
            ["value", "value", "value", "alias", "delete", "insert", "truncate", "duplicate", "indent", "swap"]
        )
    )
    at = draw(st.integers(0, size))
    starts = [m.start() for m in _VALUE_STARTS.finditer(text)]
    if op == "delete":
        return text[:at] + text[at + draw(st.integers(1, 20)) :]
    if op == "insert":
        return text[:at] + draw(INSERTS) + text[at:]
    if op == "value" and starts:  # where a value starts: tags, anchors, odd scalars
        at = draw(st.sampled_from(starts))
        return text[:at] + draw(VALUE_INSERTS) + text[at:]
    if op == "alias" and starts:  # an anchor at one value and an alias to it at a later one, maybe inside it
        first, second = sorted(draw(st.lists(st.sampled_from(starts), min_size=2, max_size=2)))
        end = text.find("\n", second) % (size + 1)  # the alias replaces the rest of its line
        return text[:first] + " &a " + text[first:second] + draw(st.sampled_from(["*a", "*b", "[*a]"])) + text[end:]
    if op == "truncate":
        return text[:at]
    lines = text.split("\n")
    row = draw(st.integers(0, len(lines) - 1))
    if op == "duplicate":
        lines.insert(row, lines[row])
    elif op == "indent":
        lines[row] = draw(st.sampled_from(["", " ", "   ", "    ", "\t", " \t", "\u3000"])) + lines[row].lstrip(" ")
    else:
        other = draw(st.integers(0, len(lines) - 1))
        lines[row], lines[other] = lines[other], lines[row]
    return "\n".join(lines)


@st.composite
def mutated_file(draw: st.DrawFn) -> tuple[str, bytes]:
    rel = draw(st.sampled_from([*YAML_FILES, HOOK]))
    text = ORIGINAL[rel]
    for _ in range(draw(st.sampled_from([1, 1, 1, 2, 4]))):
        text = draw(_edit(text))
    data = text.encode("utf-8")
    if draw(st.integers(0, 9)) == 0:  # now and then, a byte sequence that is not UTF-8 anywhere, even mid-character
        at = draw(st.integers(0, len(data)))
        data = data[:at] + draw(st.sampled_from(BAD_BYTES)) + data[at:]
    return rel, data


@pytest.mark.slow
@settings(FUZZ, max_examples=200)
@given(mutated_file())
def test_mutated_text_gives_located_problems_never_a_crash(app_root: Path, change: tuple[str, bytes]) -> None:
    rel, data = change
    with rewritten(app_root, rel, data):
        report = checked(app_root)
    # One broken file must not cascade: errors are about it (a hook's are about the assistant using it).
    owner = HOOKED_ASSISTANT if rel == HOOK else rel
    assert {p.file for p in report.errors} <= {owner}


# --- (b) a value of another type at any path of an example file -------------------------------------------

YamlPath = tuple[str | int, ...]


def _paths(value: object, path: YamlPath = ()) -> Iterator[YamlPath]:
    yield path
    if isinstance(value, dict):
        for key, item in cast(dict[str, object], value).items():
            yield from _paths(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(cast(list[object], value)):
            yield from _paths(item, (*path, index))


def _get(value: Any, path: YamlPath) -> Any:
    for part in path:
        value = value[part]
    return value


def _replaced(value: Any, path: YamlPath, new: Any) -> Any:
    if not path:
        return new
    out = copy.deepcopy(value)
    _get(out, path[:-1])[path[-1]] = new
    return out


def _type_of(value: object) -> str:
    for kind in (bool, int, float, str, list, dict):
        if isinstance(value, kind):
            return kind.__name__
    return "null"


SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=20)
)


def _nested(depth: int, leaf: Callable[[Any], Any]) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = leaf(value)
    return value


OTHER_VALUES = st.one_of(
    SCALARS,
    st.just(""),
    st.just("x" * 100_000),
    st.lists(SCALARS, max_size=3),
    st.dictionaries(st.text(max_size=8), SCALARS, max_size=3),
    st.integers(2, 100).map(lambda depth: _nested(depth, lambda v: [v])),
    st.integers(2, 100).map(lambda depth: _nested(depth, lambda v: {"a": v})),
)
TARGETS = [(rel, path) for rel in YAML_FILES for path in _paths(PARSED[rel])]


def node_lines(text: str) -> dict[str, int]:
    """The line each YAML path of a document starts on: its key's line in a mapping, its item's in a list."""
    lines: dict[str, int] = {}

    def walk(node: Node, path: YamlPath, line: int) -> None:
        lines[label(path)] = line
        if isinstance(node, MappingNode):
            for key, value in node.value:
                walk(value, (*path, key.value), key.start_mark.line + 1)
        elif isinstance(node, SequenceNode):
            for index, item in enumerate(node.value):
                walk(item, (*path, index), item.start_mark.line + 1)

    # PyYAML's stub leaves compose() unannotated; it returns the document's root node.
    compose: Callable[..., Node | None] = yaml.compose  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
    root = compose(text, Loader=yaml.SafeLoader)
    assert root is not None
    walk(root, (), root.start_mark.line + 1)
    return lines


def _inside(problem_path: str, path: YamlPath) -> bool:
    """The problem is at `path` or inside the value there."""
    where = label(path)
    if not path:
        return True  # everything is inside the document
    return problem_path == where or problem_path.startswith((where + ".", where + "["))


def _related(problem_path: str, path: YamlPath) -> bool:
    """The problem is at `path`, inside it, or at one of its ancestors."""
    return _inside(problem_path, path) or problem_path in {label(path[:n]) for n in range(len(path))}


@pytest.mark.slow
@FUZZ
@given(st.sampled_from(TARGETS), OTHER_VALUES)
def test_a_value_of_another_type_is_reported_at_its_path(
    app_root: Path, target: tuple[str, YamlPath], new: Any
) -> None:
    rel, path = target
    assume(_type_of(new) != _type_of(_get(PARSED[rel], path)))
    document = _replaced(PARSED[rel], path, new)
    text = yaml.safe_dump(document, allow_unicode=True, sort_keys=False)
    with rewritten(app_root, rel, text.encode("utf-8")):
        report = checked(app_root)
    assert {p.file for p in report.errors} <= {rel}
    if document is None:  # the whole file replaced by `null`: an empty app.yml means defaults; others are empty
        if KIND_OF[rel] == "app":
            assert report.app is not None
        else:
            assert [(p.line, p.message.startswith("file is empty")) for p in report.errors] == [(1, True)]
        return
    assert all(_related(p.path, path) for p in report.errors), (label(path), report.errors)
    if not schema_valid(KIND_OF[rel], document):  # reported at the path or inside the new value, on its line
        lines = node_lines(text)
        inside = [p for p in report.errors if _inside(p.path, path)]
        assert inside, (label(path), report.errors)
        assert all(p.line == lines[p.path] for p in inside), (lines, inside)


# --- (c) bytes that are not UTF-8 ---------------------------------------------------------------------------


@settings(FUZZ, max_examples=100)
@given(
    st.sampled_from([*YAML_FILES, HOOK]),
    st.data(),
    st.text(st.characters(codec="utf-8", exclude_characters="\r\x85\u2028\u2029"), max_size=30),
    st.sampled_from(BAD_BYTES),
)
def test_a_byte_that_is_not_utf8_is_reported_on_its_line(
    app_root: Path, rel: str, data: st.DataObject, extra: str, bad: bytes
) -> None:
    text = ORIGINAL[rel]
    at = data.draw(st.integers(0, len(text)))
    before = (text[:at] + extra).encode("utf-8")
    with rewritten(app_root, rel, before + bad + text[at:].encode("utf-8")):
        report = checked(app_root)
    if rel == HOOK:  # the assistant using the hook says it cannot be read
        [error] = report.errors
        assert (error.file, error.path) == (HOOKED_ASSISTANT, "hook")
        assert "UTF-8" in error.message
        return
    [error] = report.errors
    assert (error.file, error.line) == (rel, before.count(b"\n") + 1)
    assert "not valid UTF-8" in error.message
    assert f"0x{bad[0]:02x}" in error.message


# --- (d) random YAML documents as any kind of file -------------------------------------------------------------


def _property_names(schema: object) -> set[str]:
    names: set[str] = set()
    if isinstance(schema, dict):
        for key, value in cast(dict[str, object], schema).items():
            names |= _property_names(value)
            if key == "properties" and isinstance(value, dict):
                names |= set(cast(dict[str, object], value))
    elif isinstance(schema, list):
        for item in cast(list[object], schema):
            names |= _property_names(item)
    return names


STRINGS = [
    "scripted", "openai", "anthropic", "stdio", "http", "system", "user", "assistant", "tool", "queue", "fail",
    "auto", "demo.echo", "demo.weather", "openai.gpt-4o-mini", "use::default", "use::light", "use::", "use::nope",
    "weather", "nope", "$ENV.OPENAI_API_KEY", "$ENV.", "http://127.0.0.1:1/mcp", "hooks/concierge.ts",
    "hooks/missing.js", "../outside.js", "/etc/outside.js", "hooks", "{{ last_user }}", "{{ assistant.name }}",
    "{{ nope }}", "{% if %}", "{{ last_user | truncate(5) }}", "{% for m in messages %}{{ m }}{% endfor %}",
    "(?P<city>\\w+)", "(unclosed", "a{4294967296}", "", " ", "2001-01-01",
]  # fmt: skip
TEXT = st.one_of(st.sampled_from(STRINGS), st.text(max_size=12), st.text(max_size=12).map(lambda s: s + ".js"))
LEAVES = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False), TEXT
)  # fmt: skip
TARGET_FILE = {
    "app": "app.yml",
    "assistant": "assistants/chat/assistant.yml",
    "connector": "connectors/demo/echo.yml",
    "mcp": "mcps/weather.yml",
}


def _documents(kind: str) -> st.SearchStrategy[tuple[str, Any]]:
    keys = st.one_of(st.sampled_from(sorted(_property_names(load_schema(kind)))), st.text(max_size=8))
    values = st.recursive(
        LEAVES,
        lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(keys, children, max_size=5)),
        max_leaves=25,
    )
    return st.tuples(st.just(kind), st.one_of(st.dictionaries(keys, values, max_size=8), values))


RANDOM_DOCUMENTS = st.one_of([_documents(kind) for kind in sorted(TARGET_FILE)])


@pytest.mark.slow
@settings(FUZZ, max_examples=100)
@given(RANDOM_DOCUMENTS, st.sampled_from([False, True, None]))
def test_random_documents_are_checked_never_a_crash(
    app_root: Path, generated: tuple[str, Any], flow: bool | None
) -> None:
    kind, document = generated
    rel = TARGET_FILE[kind]
    text = yaml.safe_dump(document, allow_unicode=True, sort_keys=False, default_flow_style=flow)
    with rewritten(app_root, rel, text.encode("utf-8")):
        report = checked(app_root)
        if report.app is None:
            with pytest.raises(SpecError) as raised:
                load_app(app_root)
            assert raised.value.problems == report.errors
    if document is None and kind == "app":
        return
    if document is None or not schema_valid(kind, document):
        assert any(p.file == rel for p in report.errors), "a file that breaks its schema was accepted"


# --- (e) any value, of any type, at any path of an example file ------------------------------------------------

ANY_VALUES = st.one_of(
    LEAVES,
    st.lists(LEAVES, max_size=3),
    st.dictionaries(st.one_of(st.sampled_from(sorted(_property_names(load_schema("connector")))), TEXT), LEAVES),
)


@st.composite
def any_value_at_any_path(draw: st.DrawFn) -> tuple[str, YamlPath, Any]:
    rel = draw(st.sampled_from(YAML_FILES))
    path = draw(st.sampled_from(list(_paths(PARSED[rel]))))
    original = _get(PARSED[rel], path)
    if isinstance(original, str) and draw(st.booleans()):  # the text as written, edited
        start = draw(st.integers(0, len(original)))
        end = draw(st.integers(start, len(original)))
        return rel, path, original[:start] + draw(INSERTS) + original[end:]
    return rel, path, draw(ANY_VALUES)


@FUZZ
@given(any_value_at_any_path())
def test_any_value_at_any_path_is_checked_never_a_crash(app_root: Path, target: tuple[str, YamlPath, Any]) -> None:
    rel, path, new = target
    document = _replaced(PARSED[rel], path, new)
    text = yaml.safe_dump(document, allow_unicode=True, sort_keys=False)
    with rewritten(app_root, rel, text.encode("utf-8")):
        report = checked(app_root)
    assert {p.file for p in report.errors} <= {rel}
    if document is not None and not schema_valid(KIND_OF[rel], document):
        assert any(p.file == rel for p in report.errors), "a file that breaks its schema was accepted"


# --- regressions and known bugs ----------------------------------------------------------------------------


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel in YAML_FILES:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(ORIGINAL[rel], "utf-8")
    (root / HOOK).parent.mkdir(parents=True, exist_ok=True)
    (root / HOOK).write_text(ORIGINAL[HOOK], "utf-8")
    for rel, text in files.items():
        (root / rel).write_text(text, "utf-8")
    return root


def _errors(root: Path) -> list[tuple[str, int, str]]:
    return [(p.file, p.line, p.path) for p in checked(root).errors]


def test_an_overflowing_regex_repeat_is_a_problem(tmp_path: Path) -> None:
    echo = "type: scripted\nrules:\n  - match: {user: 'a{4294967296}'}\n    reply: x\n"
    _write(tmp_path, {"connectors/demo/echo.yml": echo})
    assert _errors(tmp_path) == [("connectors/demo/echo.yml", 3, "rules[0].match.user")]


@pytest.mark.parametrize("value", ["!!bool Chat", "!!timestamp Chat", "!!int", "!!float ''", "!!int _", "!!bool"])
def test_an_explicit_tag_on_a_value_it_cannot_read_is_a_problem(tmp_path: Path, value: str) -> None:
    _write(tmp_path, {"assistants/chat/assistant.yml": f"description: x\nname: {value}\n"})
    [error] = checked(tmp_path).errors
    assert (error.file, error.line, error.path) == ("assistants/chat/assistant.yml", 2, "name")
    assert error.message.startswith("unreadable YAML value")


def test_a_nul_in_a_hook_path_is_a_problem(tmp_path: Path) -> None:
    _write(tmp_path, {HOOKED_ASSISTANT: 'name: Concierge\nhook: "hooks/concierge\\0.js"\n'})
    assert _errors(tmp_path) == [(HOOKED_ASSISTANT, 2, "hook")]


@pytest.mark.parametrize("opener, closer", [("[", "]"), ("{a: ", "}")])
def test_deep_nesting_is_a_problem_not_a_crash(tmp_path: Path, opener: str, closer: str) -> None:
    _write(tmp_path, {"app.yml": "prompts: " + opener * 600 + "x" + closer * 600 + "\n"})
    assert [file for file, _, _ in _errors(tmp_path)] == ["app.yml"]


@pytest.mark.parametrize(
    "rel, text, path",
    [
        ("app.yml", "limits:\n  timeout_s: 1{zeros}\n", "limits.timeout_s"),
        ("connectors/local/ollama.yml", "type: openai\nmodel: m\ntimeout_s: 1{zeros}\n", "timeout_s"),
        ("connectors/demo/echo.yml", "type: scripted\ndelay_ms: 1{zeros}\nrules: [{reply: x}]\n", "delay_ms"),
        ("mcps/weather.yml", "command: python\ntimeout_s: 1{zeros}\n", "timeout_s"),
    ],
)
def test_a_number_too_large_for_a_float_is_a_problem(tmp_path: Path, rel: str, text: str, path: str) -> None:
    _write(tmp_path, {rel: text.replace("{zeros}", "0" * 400)})
    assert [(file, where) for file, _, where in _errors(tmp_path)] == [(rel, path)]


def test_a_deeply_nested_template_is_a_problem(tmp_path: Path) -> None:
    echo = "type: scripted\nrules:\n  - reply: '{{ " + "(" * 2000 + "1" + ")" * 2000 + " }}'\n"
    _write(tmp_path, {"connectors/demo/echo.yml": echo})
    assert _errors(tmp_path) == [("connectors/demo/echo.yml", 3, "rules[0].reply")]


def test_a_deeply_nested_regex_is_a_problem(tmp_path: Path) -> None:
    echo = "type: scripted\nrules:\n  - match: {user: '" + "(" * 2000 + ")" * 2000 + "'}\n    reply: x\n"
    _write(tmp_path, {"connectors/demo/echo.yml": echo})
    assert _errors(tmp_path) == [("connectors/demo/echo.yml", 3, "rules[0].match.user")]


def test_a_hook_name_too_long_for_the_file_system_is_a_problem(tmp_path: Path) -> None:
    _write(tmp_path, {HOOKED_ASSISTANT: f"name: Concierge\nhook: hooks/{'a' * 300}.js\n"})
    assert _errors(tmp_path) == [(HOOKED_ASSISTANT, 2, "hook")]


def test_template_error_in_an_escaped_string_is_on_a_line_of_the_file(tmp_path: Path) -> None:
    _write(tmp_path, {"connectors/demo/echo.yml": 'type: scripted\nrules:\n  - reply: "a\\nb\\nc\\n{{ nope }}"\n'})
    [error] = check_app(tmp_path).errors
    assert (error.line, error.path) == (3, "rules[0].reply")


def test_an_unknown_template_filter_is_a_problem_at_load(tmp_path: Path) -> None:
    _write(tmp_path, {"connectors/demo/echo.yml": "type: scripted\nrules:\n  - reply: '{{ last_user | nosuch }}'\n"})
    assert _errors(tmp_path) == [("connectors/demo/echo.yml", 3, "rules[0].reply")]


def test_a_key_without_its_colon_is_reported_on_its_own_line(tmp_path: Path) -> None:
    _write(tmp_path, {"app.yml": "history_size: 20\nstore\n\n\n# the end\n"})
    [error] = check_app(tmp_path).errors
    assert (error.file, error.line) == ("app.yml", 2)
    assert "expected ':'" in error.message


def test_a_syntax_error_at_the_end_is_on_the_last_line(tmp_path: Path) -> None:
    _write(tmp_path, {"app.yml": "history_size: 20\nstore: [sqlite"})
    [error] = check_app(tmp_path).errors
    assert (error.file, error.line) == ("app.yml", 2)
    assert error.message.startswith("malformed YAML")
