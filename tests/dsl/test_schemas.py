"""The shipped JSON Schemas: valid draft 2020-12, within the subset our validator reads, and read as jsonschema does.

Editors validate app files with these schemas (`# yaml-language-server: $schema=`) and the loader with
`yao_agent.dsl.schema.validate`: an author must never see one accept what the other rejects.
"""

from __future__ import annotations

import copy
import io
import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import jsonschema
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import yao_agent.dsl
from yao_agent.cli import main
from yao_agent.dsl.schema import KINDS, SUPPORTED_KEYWORDS, load_schema, validate

REPO = Path(__file__).resolve().parents[2]
SCHEMA_DIR = Path(yao_agent.dsl.__file__).parent / "schemas"
EXAMPLES: dict[str, list[Path]] = {
    "app": [REPO / "app.yml"],
    "assistant": sorted((REPO / "assistants").rglob("assistant.yml")),
    "connector": sorted((REPO / "connectors").rglob("*.yml")),
    "mcp": sorted((REPO / "mcps").glob("*.yml")),
    "knowledge": sorted((REPO / "knowledge").rglob("*.yml")),
    "eval": sorted((REPO / "evals").rglob("*.yml")),
}

YamlPath = tuple[str | int, ...]


# Our validator is compared against jsonschema itself (which, like editors, counts 3.0 as an integer).
YamlValidator: Any = jsonschema.Draft202012Validator


# --- (a) valid draft 2020-12, one per kind, and the same through the CLI -----------------------------------


def test_every_kind_has_exactly_one_shipped_schema() -> None:
    assert sorted(p.stem for p in SCHEMA_DIR.glob("*.json")) == sorted(KINDS)


@pytest.mark.parametrize("kind", KINDS)
def test_shipped_schema_is_valid_draft_2020_12(kind: str) -> None:
    schema = load_schema(kind)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema == json.loads((SCHEMA_DIR / f"{kind}.json").read_text("utf-8"))


@pytest.mark.parametrize("kind", KINDS)
def test_cli_prints_the_shipped_schema(kind: str) -> None:
    out = io.StringIO()
    assert main(["schema", kind], out=out) == 0
    assert json.loads(out.getvalue()) == json.loads((SCHEMA_DIR / f"{kind}.json").read_text("utf-8"))


def test_cli_refuses_an_unknown_kind(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["schema", "assistants"], out=io.StringIO())
    assert exited.value.code == 2
    assert "invalid choice: 'assistants'" in capsys.readouterr().err


@pytest.mark.parametrize("kind, path", [(k, p) for k, paths in EXAMPLES.items() for p in paths])
def test_example_files_point_editors_at_the_shipped_schema(kind: str, path: Path) -> None:
    first = path.read_text("utf-8").splitlines()[0]
    prefix = "# yaml-language-server: $schema="
    assert first.startswith(prefix)
    assert (path.parent / first.removeprefix(prefix)).resolve() == (SCHEMA_DIR / f"{kind}.json").resolve()


# --- (b) only the keywords our validator interprets ----------------------------------------------------------

_SCHEMA_MAPS = ("properties", "$defs", "patternProperties", "dependentSchemas")  # name -> sub-schema
_SCHEMA_VALUES = ("additionalProperties", "items", "propertyNames", "if", "then", "else", "not", "contains")
_SCHEMA_LISTS = ("anyOf", "allOf", "oneOf", "prefixItems")


def keywords(schema: object, where: str = "#") -> Iterator[tuple[str, str]]:
    """(location, keyword) for every keyword of a schema and of its sub-schemas — never a property name."""
    if not isinstance(schema, dict):  # `true`/`false` schemas have no keywords
        return
    for keyword, value in cast(dict[str, Any], schema).items():
        yield where, keyword
        if keyword in _SCHEMA_MAPS:
            for name, sub in value.items():
                yield from keywords(sub, f"{where}/{keyword}/{name}")
        elif keyword in _SCHEMA_VALUES:
            yield from keywords(value, f"{where}/{keyword}")
        elif keyword in _SCHEMA_LISTS:
            for index, sub in enumerate(value):
                yield from keywords(sub, f"{where}/{keyword}/{index}")


def _node(schema: Any, where: str) -> Any:
    """The sub-schema at a location given by `keywords`."""
    for part in where.split("/")[1:]:
        schema = cast(list[Any], schema)[int(part)] if isinstance(schema, list) else schema[part]
    return schema


def test_keyword_walk_tells_property_names_from_keywords() -> None:
    schema: dict[str, Any] = {
        "properties": {"oneOf": {"type": "string"}, "x": {"items": {"not": {}}}},
        "$defs": {"allOf": {"anyOf": [{"const": 1}, {"format": "uri"}]}},
        "additionalProperties": {"properties": {"if": {"contains": {}}}},
    }
    unknown = [(where, k) for where, k in keywords(schema) if k not in SUPPORTED_KEYWORDS]
    assert unknown == [
        ("#/properties/x/items", "not"),
        ("#/$defs/allOf/anyOf/1", "format"),
        ("#/additionalProperties/properties/if", "contains"),
    ]


@pytest.mark.parametrize("kind", KINDS)
def test_schema_uses_only_supported_keywords(kind: str) -> None:
    used = list(keywords(load_schema(kind)))
    assert {"type", "properties", "additionalProperties"} <= {k for _, k in used}
    assert [(where, k) for where, k in used if k not in SUPPORTED_KEYWORDS] == []


@pytest.mark.parametrize("kind", KINDS)
def test_refs_resolve_and_conditions_only_require_keys(kind: str) -> None:
    schema = load_schema(kind)
    for where, keyword in keywords(schema):
        node = _node(schema, where)
        if keyword == "$ref":  # our validator resolves local JSON pointers only
            target: Any = schema
            assert node["$ref"].startswith("#/"), where
            for part in node["$ref"].removeprefix("#/").split("/"):
                target = target[part]
            assert isinstance(target, dict), where
        if keyword in ("then", "else"):  # our validator applies only `required` from a branch, or its own condition
            assert set(node[keyword]) <= {"required", "description", "if", "then", "else"}, where


# --- (c) our validator and jsonschema agree -------------------------------------------------------------------


def _property_names(schema: Any) -> list[str]:
    return sorted({name for where, k in keywords(schema) if k == "properties" for name in _node(schema, where)[k]})


def _enum_values(schema: object) -> list[Any]:
    out: list[Any] = []
    if isinstance(schema, dict):
        for key, value in cast(dict[str, Any], schema).items():
            if key == "enum":
                out += value
            elif key == "const":
                out.append(value)
            out += _enum_values(value)
    elif isinstance(schema, list):
        for item in cast(list[Any], schema):
            out += _enum_values(item)
    return out


ALL_SCHEMAS = [load_schema(kind) for kind in KINDS]
NAMES = sorted({name for schema in ALL_SCHEMAS for name in _property_names(schema)})
STRINGS = sorted(
    {str(v) for schema in ALL_SCHEMAS for v in _enum_values(schema)}
    | {"", " ", "a", "A-b_c.d", "-a", "a b", "x.js", "x.js\n", "x.jsx", "http://h", "https://h", "ftp://h", "use::"}
)
NUMBERS = [-1, 0, 1, 2, 3, 4, 8, 399, 400, 599, 600, 1023, 1024, 4096, 4097, 65535, 65536, 100000, 100001, 600001]
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from(NUMBERS),
    st.integers(),
    st.sampled_from([0.0, -0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 1e-9, -1e-9]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(STRINGS),
    st.text(max_size=10),
)
KEYS = st.one_of(st.sampled_from(NAMES), st.text(max_size=10))
VALUES = st.recursive(
    SCALARS,
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(KEYS, children, max_size=5)),
    max_leaves=20,
)
EXAMPLE_DOCS = {kind: [yaml.safe_load(p.read_text("utf-8")) for p in paths] for kind, paths in EXAMPLES.items()}


def _paths(value: object, path: YamlPath = ()) -> list[YamlPath]:
    out = [path]
    if isinstance(value, dict):
        for key, item in cast(dict[str, Any], value).items():
            out += _paths(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(cast(list[Any], value)):
            out += _paths(item, (*path, index))
    return out


def _get(document: Any, path: YamlPath) -> Any:
    for part in path:
        document = document[part]
    return document


def _parent(document: Any, path: YamlPath) -> Any:
    for part in path[:-1]:
        document = document[part]
    return document


@st.composite
def near_examples(draw: st.DrawFn) -> tuple[str, Any]:
    """An example file of one kind with a few values set, keys removed or keys added."""
    kind = draw(st.sampled_from(KINDS))
    document = copy.deepcopy(draw(st.sampled_from(EXAMPLE_DOCS[kind])))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_paths(document)))
        if not path:
            continue
        parent = _parent(document, path)
        action = draw(st.sampled_from(["set", "set", "delete", "add"]))
        if action == "delete" and isinstance(parent, dict):
            del parent[path[-1]]
        elif action == "add" and isinstance(parent, dict):
            parent[draw(KEYS)] = draw(VALUES)
        else:
            parent[path[-1]] = draw(VALUES)
    return kind, document


ANY_DOCUMENT = st.tuples(st.sampled_from(KINDS), st.one_of(st.dictionaries(KEYS, VALUES, max_size=8), VALUES))


# Documents shaped by a schema: valid ones, and the same with up to four values just outside their
# schema (one off a bound, a missing required key, an unknown key, a duplicate item, another type),
# so that the validators are compared where they could differ, not only on documents wrong everywhere.


def _resolve(schema: Any, root: Any) -> Any:
    while "$ref" in schema:
        schema = _node(root, schema["$ref"])
    return schema


def _number_range(schema: Any) -> tuple[float | None, float | None, bool]:
    exclusive = "exclusiveMinimum" in schema
    return schema.get("exclusiveMinimum", schema.get("minimum")), schema.get("maximum"), exclusive


def _object(schema: Any, root: Any) -> st.SearchStrategy[Any]:
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    fixed = {key: conforming(properties.get(key, {}), root) for key in required}
    optional = {key: conforming(sub, root) for key, sub in properties.items() if key not in required}
    extra = schema.get("additionalProperties", True)
    if isinstance(extra, dict):
        names = schema.get("propertyNames", {})
        name = st.from_regex(cast(str, names["pattern"]), fullmatch=True) if "pattern" in names else st.text(max_size=8)
        more: st.SearchStrategy[dict[str, Any]] = st.dictionaries(name, conforming(extra, root), max_size=3)
    elif extra is False:
        more = st.just({})
    else:
        more = st.dictionaries(KEYS, VALUES, max_size=2)

    def merged(known: dict[str, Any], others: dict[str, Any]) -> dict[str, Any]:
        return {**others, **known}

    value = st.builds(merged, st.fixed_dictionaries(fixed, optional=optional), more)
    if "if" not in schema:
        return value

    def completed(found: dict[str, Any], more: Completion) -> dict[str, Any]:
        return {**more(found), **found}

    return st.builds(completed, value, _completion(schema, properties, root))


Completion = Callable[[dict[str, Any]], dict[str, Any]]


def _completion(schema: Any, properties: Any, root: Any) -> st.SearchStrategy[Completion]:
    """What a mapping needs besides its own keys: those the `then` or `else` branch its `if` picks requires
    (the shipped branches only require keys, or hold a condition of their own)."""
    if "if" not in schema:
        return st.just(lambda found: {})
    condition = YamlValidator(schema["if"])
    then, otherwise = (
        st.tuples(
            st.fixed_dictionaries(
                {key: conforming(properties.get(key, {}), root) for key in branch.get("required", ())}
            ),
            _completion(branch, properties, root),
        )
        for branch in (schema.get("then", {}), schema.get("else", {}))
    )

    def chosen(a: tuple[dict[str, Any], Completion], b: tuple[dict[str, Any], Completion]) -> Completion:
        def needed(found: dict[str, Any]) -> dict[str, Any]:
            keys, more = a if condition.is_valid(found) else b
            return {**keys, **more(found)}

        return needed

    return st.builds(chosen, then, otherwise)


def conforming(schema: Any, root: Any) -> st.SearchStrategy[Any]:
    """Values valid against `schema`, except where an `if`/`then`/`else` asks for more."""
    schema = _resolve(schema, root)
    if "anyOf" in schema:
        return st.one_of([conforming(branch, root) for branch in schema["anyOf"]])
    if "enum" in schema or "const" in schema:
        return st.sampled_from(schema.get("enum", [schema.get("const")]))
    kind = schema.get("type")
    if kind == "object":
        return _object(schema, root)
    if kind == "array":
        fewest = schema.get("minItems", 0)
        unique = json.dumps if schema.get("uniqueItems") else None
        return st.lists(
            conforming(schema.get("items", {}), root), min_size=fewest, max_size=fewest + 3, unique_by=unique
        )
    if kind == "string":
        shortest = schema.get("minLength", 0)
        pattern: str | None = schema.get("pattern")
        text = st.from_regex(pattern) if pattern else st.text(min_size=shortest, max_size=12)
        return text.filter(lambda value: len(value) >= shortest)
    if kind == "integer":
        return st.integers(schema.get("minimum"), schema.get("maximum"))
    if kind == "number":
        low, high, exclusive = _number_range(schema)
        floats = st.floats(low, high, exclude_min=exclusive, allow_nan=False, allow_infinity=False)
        whole = st.integers(
            None if low is None else math.floor(low) + 1 if exclusive else math.ceil(low),
            None if high is None else math.floor(high),
        )
        return st.one_of(floats, whole)
    if kind == "boolean":
        return st.booleans()
    return VALUES


def _misses(schema: Any, current: Any) -> st.SearchStrategy[Any]:
    """Values just outside a (resolved) schema, given the value that is there now."""
    near: list[Any] = []
    if "enum" in schema or "const" in schema:
        near += STRINGS
    if schema.get("type") in ("integer", "number"):
        low, high, _ = _number_range(schema)
        for bound in (b for b in (low, high) if b is not None):
            near += [bound + step for step in (0, -1, 1, -0.5, 0.5, -1e-9, 1e-9)] + [float(bound), True, False]
    if isinstance(current, list):
        near += [current + current[:1], current[:-1], []]
    if isinstance(current, dict):
        near += [
            {k: v for k, v in cast(dict[str, Any], current).items() if k != key} for key in schema.get("required", [])
        ]
        near += [{**current, "unknown": 1}, {**current, "-bad name": "x"}, {**current, "": []}]
    if isinstance(current, str):
        near += ["", current + "\n", current[1:], current.upper(), " " + current, current + ".js", "http://" + current]
    other_types: st.SearchStrategy[Any] = st.sampled_from([None, True, 0, 1.5, "", "1", [], {}])
    return st.one_of(st.sampled_from(near), st.sampled_from(near), other_types) if near else other_types


def _schema_at(schema: Any, root: Any, document: Any, path: YamlPath) -> Any:
    """The schema that applies at `path` of a document; for an anyOf, the branch of the value's type."""
    schema, value = _resolve(schema, root), document
    for part in path:
        if "anyOf" in schema:
            branches = [_resolve(b, root) for b in schema["anyOf"]]
            schema = next((b for b in branches if validate(value, b) == []), branches[-1])
        if isinstance(part, int):
            schema = schema.get("items", {})
        elif part in schema.get("properties", {}):
            schema = schema["properties"][part]
        else:
            extra = schema.get("additionalProperties", True)
            schema = cast(dict[str, Any], extra) if isinstance(extra, dict) else {}
        schema, value = _resolve(schema, root), value[part]
    return schema


CONFORMING = {kind: conforming(load_schema(kind), load_schema(kind)) for kind in KINDS}


@st.composite
def shaped(draw: st.DrawFn, kind: str) -> tuple[str, Any]:
    schema = load_schema(kind)
    document = draw(CONFORMING[kind])
    for _ in range(draw(st.integers(0, 4))):
        located = [(path, _schema_at(schema, schema, document, path)) for path in _paths(document)]
        # Where the schema says something (not in free-form values), leaves 4 times as often as mappings.
        weighted = [(path, sub) for path, sub in located if sub for _ in range(1 if "properties" in sub else 4)]
        path, where = draw(st.sampled_from(weighted))
        missed = draw(_misses(where, _get(document, path)))
        if not path:
            document = missed
            continue
        document = copy.deepcopy(document)
        _parent(document, path)[path[-1]] = missed
    return kind, document


SHAPED = st.one_of([shaped(kind) for kind in KINDS])


def _flagged(errors: Any) -> Iterator[YamlPath]:
    """Every instance location jsonschema finds wrong, including inside the branches of an anyOf."""
    for error in errors:
        yield tuple(error.absolute_path)
        yield from _flagged(error.context or ())


def assert_agreement(kind: str, document: Any) -> None:
    schema = load_schema(kind)
    ours = validate(document, schema)
    theirs = list(YamlValidator(schema).iter_errors(document))
    assert (ours == []) == (theirs == []), (ours, [e.message for e in theirs])
    assert all(message.strip() for _, message in ours)
    # Each place we point the author to is one jsonschema also finds wrong: the value itself, or the
    # mapping or list it sits in (jsonschema puts unknown keys, bad key names and duplicates there).
    flagged = set(_flagged(theirs))
    for path, message in ours:
        assert path in flagged or path[:-1] in flagged, (path, message, sorted(flagged, key=str))
    # And each mistake jsonschema finds, we report there or inside it: none is left out.
    for error in theirs:
        where = tuple(error.absolute_path)
        assert any(path[: len(where)] == where for path, _ in ours), (where, error.message, ours)


AGREE = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@AGREE
@given(near_examples())
def test_validators_agree_near_the_examples(generated: tuple[str, Any]) -> None:
    assert_agreement(*generated)


@AGREE
@given(SHAPED)
def test_validators_agree_on_documents_shaped_by_the_schema(generated: tuple[str, Any]) -> None:
    assert_agreement(*generated)


@AGREE
@given(ANY_DOCUMENT)
def test_validators_agree_on_any_document(generated: tuple[str, Any]) -> None:
    assert_agreement(*generated)


@pytest.mark.parametrize("kind", KINDS)
def test_validators_agree_on_the_examples(kind: str) -> None:
    for document in EXAMPLE_DOCS[kind]:
        assert validate(document, load_schema(kind)) == []
        assert_agreement(kind, document)


def _edges(schema: Any) -> list[Any]:
    """Values on and just off every bound of a sub-schema, and one of each other type."""
    values: list[Any] = [None, True, False, 0, 1, -1, 1.5, "", " ", "a", [], ["a"], ["a", "a"], {}, {"a": 1}]
    values += [{"-a": 1}, {"": 1}, {"a b": "x"}, {"a.b_c-d": "x"}, {"unknown": None}]
    values += STRINGS
    for keyword in ("minimum", "maximum", "exclusiveMinimum"):
        if keyword in schema:
            bound = schema[keyword]
            values += [bound + step for step in (0, -1, 1, -0.5, 0.5, -1e-9, 1e-9)] + [float(bound)]
    for keyword in ("minLength", "minItems"):
        if keyword in schema:
            values += [size * item for size in (schema[keyword] - 1, schema[keyword]) for item in ("x", ["x"])]
    return values


@pytest.mark.parametrize("kind", KINDS)
def test_validators_agree_at_the_edges_of_every_sub_schema(kind: str) -> None:
    root = load_schema(kind)
    locations = sorted({where for where, _ in keywords(root)})
    assert len(locations) > 10
    disagreements: list[tuple[str, Any, list[tuple[YamlPath, str]]]] = []
    for where in locations:
        sub = {**_node(root, where), "$defs": root.get("$defs", {})}  # so that its $refs resolve
        for value in _edges(sub):
            if (validate(value, sub) == []) != YamlValidator(sub).is_valid(value):
                disagreements.append((where, value, validate(value, sub)))
    assert disagreements == []


def test_integral_float_is_an_integer_like_json_schema() -> None:
    schema = load_schema("app")
    assert YamlValidator(schema).is_valid({"history_size": 20.0})
    assert validate({"history_size": 20.0}, schema) == []
