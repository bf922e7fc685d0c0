"""A small MCP server with one tool per behaviour the tool manager must handle.

Used in-process (`server`), over stdio (`python tests/support/mcp_server.py`) and over streamable
HTTP (`python tests/support/mcp_server.py http PORT`).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult

server = MCPServer("testing")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def echo(text: str, times: int = 1) -> str:
    """Repeat a text."""
    return text * times


@server.tool()
def words(text: str) -> list[str]:
    """One content part per word."""
    return text.split()


@server.tool()
def refuse(reason: str) -> str:
    """Fails the way a tool reports a problem the model should read."""
    raise ToolError(f"refused: {reason}")


@server.tool()
async def explode(reason: str) -> str:
    """Crashes unexpectedly; the server keeps the details to itself."""
    raise ValueError(f"kaboom: {reason}")


@server.tool()
def protocol_fail() -> str:
    """Fails at the protocol level (a JSON-RPC error)."""
    raise MCPError(code=-32001, message="custom protocol error")


@server.tool()
async def nap(seconds: float, label: str = "") -> str:
    """Sleeps, then says which call it was."""
    await asyncio.sleep(seconds)
    return f"woke {label}".strip()


@server.tool()
async def nap_marked(seconds: float, marker: str) -> str:
    """Sleeps between writing `<marker>.started` and `<marker>.finished`, so a test can see where it stopped;
    stopped meanwhile, it writes `<marker>.cancelled`: what a test waits for, instead of for time to pass."""
    _mark(marker + ".started")
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        _mark(marker + ".cancelled")
        raise
    _mark(marker + ".finished")
    return "done"


@server.tool()
async def tally(path: str, label: str, hold: str = "") -> str:
    """Appends `label` to the file `path` when it finishes (one line per execution, so a test counts them);
    with `hold`, it first writes `<hold>.started` and waits until a file `hold` exists."""
    if hold:
        _mark(hold + ".started")
        await asyncio.to_thread(_await_file, hold)
    await asyncio.to_thread(_append_line, path, label)
    return f"counted {label}"


def _await_file(path: str, within: float = 60.0) -> None:
    """Until the file exists (a thread, so a cancelled call stops waiting at the latest after `within`)."""
    deadline = time.monotonic() + within
    while not Path(path).exists() and time.monotonic() < deadline:
        time.sleep(0.02)


def _append_line(path: str, line: str) -> None:
    with Path(path).open("a") as out:
        out.write(line + "\n")


def _mark(path: str) -> None:
    Path(path).write_text("reached")


@server.tool()
def weather(city: str) -> dict[str, Any]:
    """Structured content without text."""
    return {"city": city, "temp_c": 21.5}


@server.tool()
def measurements(city: str) -> CallToolResult:
    """Structured content only, no text at all."""
    return CallToolResult(content=[], structured_content={"city": city, "readings": [1, 2, 3]})


@server.tool()
def silence() -> CallToolResult:
    """Succeeds without a word."""
    return CallToolResult(content=[])


@server.tool()
def lookup(query: str) -> list[dict[str, str]]:
    """Web search as a search step reads it: results with a title, an address and a snippet."""
    if query == "fail":
        raise ValueError("the search engine is down")
    return [{"title": f"About {query}", "url": "https://example.org/a", "snippet": f"The web says {query} matters."}]


@server.tool()
def total(numbers: list[int]) -> int:
    """Sum a list."""
    return sum(numbers)


@server.tool()
def big(size: int) -> str:
    """A long result."""
    return "x" * size


@server.tool()
def pid() -> int:
    """The server's process id."""
    return os.getpid()


@server.tool()
def getenv(name: str) -> str:
    """One variable of the server's environment."""
    return os.environ.get(name, "<unset>")


@server.tool()
def where() -> str:
    """The server's interpreter and working directory."""
    return f"{sys.executable}|{os.getcwd()}"


@server.tool()
def header(name: str, ctx: Context) -> str:
    """One header of the HTTP request that carried this call."""
    return (ctx.headers or {}).get(name.lower(), "<none>")


@server.tool()
def shout() -> str:
    """Writes to stderr, which must never reach the client's terminal."""
    print("noise on stderr", file=sys.stderr, flush=True)
    return "ok"


@server.tool()
def die() -> str:
    """Kills the server mid-call."""
    os._exit(3)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")
