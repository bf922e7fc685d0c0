"""Checking a model's tool arguments against an MCP tool's schema never makes the server fetch anything."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from typing import ClassVar

import pytest

from yao_agent.tools.catalog import ToolSpec
from yao_agent.tools.validate import ArgumentChecker, ArgumentError


class Fetched(http.server.BaseHTTPRequestHandler):
    hits: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        Fetched.hits.append(self.path)
        body = b'{"type": "string"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return None


@pytest.fixture
def schema_host() -> Iterator[str]:
    """A loopback server that would answer a `$ref` with a schema, and counts who asks."""
    Fetched.hits = []
    server = http.server.HTTPServer(("127.0.0.1", 0), Fetched)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def spec(parameters: dict[str, object]) -> ToolSpec:
    return ToolSpec(name="srv__tool", server="srv", tool="tool", description="", parameters=parameters)


def test_a_remote_ref_in_a_tool_schema_is_never_fetched(schema_host: str) -> None:
    """Fixed: jsonschema fetched a `$ref` URL of an MCP server's schema (a request the server chose)."""
    remote = spec({"type": "object", "properties": {"city": {"$ref": f"{schema_host}/city.json"}}})
    ArgumentChecker().check(remote, {"city": 1})  # not checked here: the MCP server checks it its own way
    assert Fetched.hits == []


def test_local_refs_still_check_the_arguments() -> None:
    local = spec({"type": "object", "$defs": {"city": {"type": "string"}},
                  "properties": {"city": {"$ref": "#/$defs/city"}}, "required": ["city"]})  # fmt: skip
    checker = ArgumentChecker()
    checker.check(local, {"city": "Lima"})
    with pytest.raises(ArgumentError, match=r"arguments\.city: 1 is not of type 'string'"):
        checker.check(local, {"city": 1})


def test_a_tool_schemas_patterns_run_on_re2(caplog: pytest.LogCaptureFixture) -> None:
    """The arguments are the model's: a pattern runs in linear time over them. (Python's `$` matches before a
    final newline, RE2's does not: "a\\n" tells which engine matched.)"""
    checker = ArgumentChecker()
    anchored = spec({"type": "object", "properties": {"code": {"type": "string", "pattern": "^a$"}}})
    with pytest.raises(ArgumentError, match=r"^arguments.code: 'a\\n' does not match '\^a\$'$"):
        checker.check(anchored, {"code": "a\n"})
    catastrophic = spec({"type": "object", "properties": {"name": {"type": "string", "pattern": "^(a+)+$"}}})
    with pytest.raises(ArgumentError, match="does not match"):
        checker.check(catastrophic, {"name": "a" * 40 + "!"})  # 2**40 ways to try for Python's `re`
    backreference = spec({"type": "object", "properties": {"twice": {"type": "string", "pattern": "^(a)\\1$"}}})
    checker.check(backreference, {"twice": "ab"})  # RE2 cannot run it: the MCP server checks it its own way
    assert "tool 'tool' has a schema this server does not apply (the pattern '^(a)\\\\1$' cannot be used" in caplog.text
