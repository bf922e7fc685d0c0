"""The generated parts of the reference pages, made while the site is built (mkdocs.yml `hooks:`).

A page holds `<!-- generated: NAME -->` where a generated part goes: the app files' keys from the JSON
Schemas the package ships, the commands from the CLI's parser, the routes from the server's OpenAPI
document, and the events' fields from their dataclasses. Nothing generated is committed, so none of it
can drift from the code it describes.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import json
import re
import tempfile
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

MARKER = re.compile(r"<!-- generated: ([a-z]+) -->")
REPO = Path(__file__).resolve().parents[1]
Json = Mapping[str, Any]


def on_page_markdown(markdown: str, **_: object) -> str:
    """Each marker becomes its generated markdown (an unknown name fails the build)."""
    return MARKER.sub(lambda found: GENERATORS[found.group(1)](), markdown)


def cell(text: object) -> str:
    """A value as one table cell: on one line, its pipes escaped (inside `code` a pipe splits no cell,
    and a backslash there would show)."""
    parts = " ".join(str(text).split()).split("`")
    return "`".join(part if inside % 2 else part.replace("|", "\\|") for inside, part in enumerate(parts))


def table(head: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return [*lines, *("| " + " | ".join(cell(c) for c in row) + " |" for row in rows), ""]


# --- the app's files, from the JSON Schemas -------------------------------------------------------------

FILES = (
    ("app", "app.yml"),
    ("assistant", "assistants/<path>/assistant.yml"),
    ("connector", "connectors/<path>.yml"),
    ("mcp", "mcps/<id>.yml"),
    ("knowledge", "knowledge/<path>.yml"),
    ("eval", "evals/<path>.yml"),
)
TYPE_NAMES = {"object": "mapping", "array": "list"}


def resolve(node: Json, root: Json) -> Json:
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return typing.cast(Json, root["$defs"][ref.removeprefix("#/$defs/")])
    return node


def type_text(node: Json, root: Json) -> str:
    node = resolve(node, root)
    if "enum" in node:
        return "one of " + ", ".join(f"`{v}`" for v in node["enum"])
    if "const" in node:
        return f"`{node['const']}`"
    if "anyOf" in node:
        return " or ".join(type_text(option, root) for option in node["anyOf"])
    kind = node.get("type")
    names = [kind] if isinstance(kind, str) else list(kind or [])
    if not names:
        return "any"
    words = [TYPE_NAMES.get(n, n) for n in names]
    if "array" in names and isinstance(node.get("items"), Mapping):
        words[names.index("array")] = "list of " + type_text(node["items"], root)
    return " or ".join(words)


def constraints(node: Json) -> str:
    """The schema's description, then its bounds in parentheses."""
    bounds = {"minimum": "≥", "exclusiveMinimum": ">", "maximum": "≤", "minLength": "length ≥", "minItems": "items ≥"}
    said = [f"{sign} {node[key]}" for key, sign in bounds.items() if key in node]
    if "pattern" in node:
        said.append(f"matches `{node['pattern']}`")
    if node.get("uniqueItems"):
        said.append("no repeats")
    text = str(node.get("description", ""))
    return f"{text} ({', '.join(said)})".strip() if said else text


def schema_rows(node: Json, root: Json, prefix: str, required: frozenset[str]) -> Iterator[tuple[str, ...]]:
    """One row per key, nested keys as `a.b`, list items as `a[]`, a mapping's entries as `a.<name>`."""
    for key, child in typing.cast(Mapping[str, Json], node.get("properties", {})).items():
        yield from key_rows(child, root, f"{prefix}{key}", key in required)
    extra = node.get("additionalProperties")
    if isinstance(extra, Mapping) and prefix:
        yield from key_rows(typing.cast(Json, extra), root, f"{prefix}<name>", False)


def key_rows(child: Json, root: Json, path: str, required: bool) -> Iterator[tuple[str, ...]]:
    node = resolve(child, root)
    value = node.get("default")
    shown = value if isinstance(value, str) else json.dumps(value)  # as YAML writes it: true, null, 20
    default = f"`{shown}`" if "default" in node else ("required" if required else "")
    what = constraints(child) or constraints(node)
    if "propertyNames" in node and node["propertyNames"].get("description"):
        what = f"{what} Each `<name>`: {node['propertyNames']['description']}.".strip()
    yield (f"`{path}`", type_text(child, root), default, what)
    yield from nested_rows(node, root, path)


def nested_rows(node: Json, root: Json, path: str) -> Iterator[tuple[str, ...]]:
    """The keys inside a value: of a mapping (`a.b`), of a list's items (`a[].b`), of each `anyOf` form."""
    for option in [resolve(o, root) for o in node.get("anyOf", [])] or [node]:
        if option.get("properties") or isinstance(option.get("additionalProperties"), Mapping):
            yield from schema_rows(option, root, f"{path}.", frozenset(option.get("required", [])))
        items = option.get("items")
        if isinstance(items, Mapping):
            yield from nested_rows(resolve(typing.cast(Json, items), root), root, f"{path}[]")


def condition(root: Json) -> str:
    """A schema's `if`/`then`/`else` (an `else` may hold another condition), in words."""
    if "if" not in root:
        return ""
    ((key, test),) = root["if"]["properties"].items()
    then, other = root["then"], root["else"]
    said = f"when `{key}` is `{test['const']}`, {needs(then)}; otherwise"
    return said + (f", {condition(other)}" if "if" in other else f" {needs(other)}.")


def needs(branch: Json) -> str:
    required, why = branch.get("required", []), branch.get("description", "")
    asked = f"`{'`, `'.join(required)}` is required" if required else "nothing more is required"
    return f"{asked} ({why})" if why else asked


def dsl() -> str:
    from yao_agent.dsl.schema import load_schema

    out: list[str] = []
    for kind, where in FILES:
        root = load_schema(kind)
        out += [f"### {kind}", "", f"`{where}`: {root['description']} (`yao-agent schema {kind}`)", ""]
        said = condition(root)
        out += [said[:1].upper() + said[1:], ""] if said else []
        rows = list(schema_rows(root, root, "", frozenset(root.get("required", []))))
        out += table(("key", "type", "default", "what"), rows)
    return "\n".join(out)


# --- the commands, from the parser ----------------------------------------------------------------------


def commands(parser: argparse.ArgumentParser, path: str) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every command a user can type, with its parser, in the order `--help` lists them."""
    found = False
    for action in parser._actions:  # pyright: ignore[reportPrivateUsage]  (argparse lists sub-parsers nowhere else)
        if isinstance(action, argparse._SubParsersAction):  # pyright: ignore[reportPrivateUsage]
            choices = typing.cast(dict[str, argparse.ArgumentParser], action.choices)  # pyright: ignore[reportUnknownMemberType]
            for name, sub in choices.items():
                found = True
                yield from commands(sub, sub.prog if sub.prog.startswith(path) else f"{path} {name}")
    if not found:
        yield path, parser


GLOBAL = ("--app", "--db")  # every command takes them: listed once, not under each command
HIDDEN = (argparse._HelpAction, argparse._SubParsersAction)  # pyright: ignore[reportPrivateUsage]


def option_rows(parser: argparse.ArgumentParser, *, every: bool = False) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for action in parser._actions:  # pyright: ignore[reportPrivateUsage]
        hidden = action.help == argparse.SUPPRESS or isinstance(action, HIDDEN)
        if hidden or (not every and set(action.option_strings) & set(GLOBAL)):
            continue
        metavar = action.metavar if isinstance(action.metavar, str) else ""
        name = ", ".join(action.option_strings) or metavar or action.dest
        if action.option_strings and action.nargs != 0:
            name += f" {metavar or action.dest.upper()}"
        what = action.help or ""
        choices = typing.cast(Iterable[object] | None, action.choices)  # pyright: ignore[reportUnknownMemberType]
        if choices is not None:
            what += (" " if what else "") + "one of: " + ", ".join(str(c) for c in choices)
        if action.option_strings and action.default not in (None, False, argparse.SUPPRESS):
            what += f" (default: {action.default})"
        rows.append((f"`{name}`", what))
    return rows


def cli() -> str:
    from yao_agent.cli import build_parser

    top = build_parser()
    out = ["## Every command", "", top.description or "", "", "Given before or after the command:", ""]
    everywhere = [row for row in option_rows(top, every=True) if row[0].strip("`").split()[0] in GLOBAL]
    out += table(("argument", "what"), everywhere)
    out += ["## Commands", ""]
    for path, parser in commands(top, "yao-agent"):
        parser.formatter_class = functools.partial(argparse.HelpFormatter, width=100)
        out += [f"### {path}", "", parser.description or "", ""]
        out += ["```text", parser.format_usage().strip(), "```", ""]
        rows = option_rows(parser)
        out += table(("argument", "what"), rows) if rows else ["No arguments of its own.", ""]
    return "\n".join(out)


# --- the routes, from the OpenAPI document ---------------------------------------------------------------


@functools.cache
def openapi() -> Json:
    """The document the server serves at /openapi.json, for the example app (on a throw-away store)."""
    from yao_agent import Runs
    from yao_agent.server.app import create_app

    async def build(folder: str) -> Json:
        runs = await Runs.open(REPO, db=f"sqlite:///{folder}/docs.db")
        try:
            return create_app(runs).openapi()
        finally:
            await runs.aclose()

    with tempfile.TemporaryDirectory() as folder:
        return asyncio.run(build(folder))


def shape(node: Json) -> str:
    """A schema of the OpenAPI document in a few words; a named one links to its section."""
    if "$ref" in node:
        name = str(node["$ref"]).rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    if "anyOf" in node:
        return " or ".join(shape(option) for option in node["anyOf"])
    if "enum" in node:
        return "one of " + ", ".join(f"`{value}`" for value in node["enum"])
    kind = node.get("type")
    if kind == "array":
        return "list of " + shape(node.get("items", {}))
    if kind == "object" and isinstance(node.get("additionalProperties"), Mapping) and node["additionalProperties"]:
        return "map of " + shape(node["additionalProperties"])
    return {"object": "object", None: "any JSON"}.get(kind, str(kind))


def operation(method: str, path: str, op: Json) -> list[str]:
    out = [f"### {method.upper()} `{path}`", "", f"**{op.get('summary', '')}.** {op.get('description', '')}", ""]
    params = [(f"`{p['name']}`", p["in"], shape(p.get("schema", {})), "yes" if p.get("required") else "",
               p.get("description", "")) for p in op.get("parameters", [])]  # fmt: skip
    if params:
        out += table(("parameter", "in", "type", "required", "what"), params)
    body = op.get("requestBody", {}).get("content", {})
    for media, content in body.items():
        out += [f"Body ({media}): {shape(content.get('schema', {}))}", ""]
    answers: list[tuple[str, ...]] = []
    for status, answer in op.get("responses", {}).items():
        kinds = [f"{shape(c.get('schema', {}))} ({media})" for media, c in answer.get("content", {}).items()]
        answers.append((status, answer.get("description", ""), "; ".join(kinds)))
    return out + table(("status", "when", "body"), answers)


def http() -> str:
    document = openapi()
    out = ["## Routes", ""]
    for path, methods in typing.cast(Mapping[str, Json], document["paths"]).items():
        for method, op in methods.items():
            out += operation(method, path, op)
    out += ["## Shapes", ""]
    for name, schema in sorted(typing.cast(Mapping[str, Json], document["components"]["schemas"]).items()):
        required = set(schema.get("required", []))
        fields = [(f"`{key}`", shape(prop), "yes" if key in required else "", prop.get("description", ""))
                  for key, prop in schema.get("properties", {}).items()]  # fmt: skip
        out += [f"### {name}", "", schema.get("description", ""), ""]
        out += table(("field", "type", "required", "what"), fields) if fields else [shape(schema), ""]
    return "\n".join(out)


# --- the events, from their dataclasses ------------------------------------------------------------------

# The code's own cross-references to its design notes, such as "(… \u00a75)": not the reader's to follow.
INTERNAL = re.compile("\\s*\\([A-Z]+ \u00a7[^)]*\\)")


def python_type(annotation: object) -> str:
    if annotation is type(None):
        return "null"
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return "one of " + ", ".join(f"`{value}`" for value in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(python_type(arg) for arg in typing.get_args(annotation))
    if origin is dict:
        return "object"
    names: dict[object, str] = {str: "string", int: "integer", float: "number", bool: "boolean", Any: "any JSON"}
    return names.get(annotation, str(annotation))


def events() -> str:
    from yao_agent import events as module
    from yao_agent import shapes

    out: list[str] = []
    for cls in typing.get_args(module.Event):
        hints = typing.get_type_hints(cls, localns=vars(shapes))  # (events import the shapes for typing only)
        fields = [f for f in dataclasses.fields(cls) if f.name != "type"]
        sample = module.to_dict(cls(**{f.name: "x" for f in fields}))  # every field set: the wire names
        wire = dict(zip([f.name for f in fields], [k for k in sample if k != "type"], strict=True))
        doc = cls.__doc__ or ""
        out += [f"### {sample['type']}", ""]
        out += [] if doc.startswith(cls.__name__ + "(") else [" ".join(INTERNAL.sub("", doc).split()), ""]
        rows = [(f"`{wire[f.name]}`", python_type(hints[f.name]), "when set" if f.default is None else "always")
                for f in fields]  # fmt: skip
        out += table(("field", "type", "sent"), [("`type`", f"`{sample['type']}`", "always"), *rows])
    return "\n".join(out)


# --- the exit codes, from their enum ---------------------------------------------------------------------


def exits() -> str:
    """`errors.Exit`, each code with the comment its line carries in the source."""
    import inspect

    from yao_agent.errors import Exit

    said = dict(re.findall(r"^\s+(\w+) = \d+\s+# (.*)$", inspect.getsource(Exit), re.M))
    return "\n".join(
        table(("code", "name", "meaning"), [(str(e.value), f"`{e.name}`", said.get(e.name, "")) for e in Exit])
    )


GENERATORS: dict[str, Callable[[], str]] = {"dsl": dsl, "cli": cli, "http": http, "events": events, "exits": exits}
