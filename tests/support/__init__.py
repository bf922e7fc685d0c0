"""What the tests share: apps on disk, runtimes and servers over doubles, waits, and the MCP server the tools
call. Test modules import from here only, never from another test module or a conftest; conftest files hold
the fixtures, built from these.

- `apps`: an app on disk (`make_app`) and what checking it says.
- `runtimes`: a runtime whose model is a double; a turn through it and what it stored.
- `tools`, `mcp_server`: the `testing` MCP server (one tool per behaviour) and a runtime that uses it.
- `hooks`, `processes`: a host double for a hook's `ctx`; the hook worker processes as /proc shows them.
- `connectors`: connectors pointed at the loopback fake provider, and a way to drain a call.
- `context`, `quota`, `usage`, `approvals`: the apps and model doubles of those features' tests.
- `servers`, `browser`, `nginx`: a live server (uvicorn in this process, or `yao-agent serve` as an OS
  process), a headless Chromium on its page, nginx in front of it.
- `cli`: `yao-agent` in this process or on a pseudo-terminal.
- `clock`: the one clock double.
- `docs`: the documentation's pages and their code blocks.
- `stores`, `postgres`, `pairing`, `waits`: run records, the PostgreSQL server, what makes a chat valid
  to send, waiting for a state no event announces.
"""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
