"""The context-window model: it works turn by turn with a tool, writes summaries when asked, and refuses any
request larger than its window, measured by a real tokenizer (o200k)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.mcp_server import server as testing_server
from tests.support.runtimes import app_files, make_runtime, turn
from yao_agent.events import Event
from yao_agent.metering.tokens import counter_for
from yao_agent.pipeline import Runtime
from yao_agent.pipeline.compact import SUMMARY_PROMPT
from yao_agent.store import SqlStore
from yao_agent.testing import FunctionModel, RecordedRequest, Reply, ToolCall
from yao_agent.tools import ToolManager

WINDOW, RESERVE = 2000, 200
BUDGET = WINDOW - RESERVE
CONTEXT = (
    f"{{max_input_tokens: {WINDOW}, reserve_output_tokens: {RESERVE}, tool_result_max_tokens: 300, "
    "keep_recent_turns: 2}"
)
AGENT = f"""\
name: Agent
prompts:
  - {{role: system, content: 'You are {{{{ assistant.name }}}}. Use the tools.'}}
mcp:
  servers: [{{server: testing, tools: [echo]}}]
context: {CONTEXT}
"""
O200K = counter_for(["gpt-4o"])
assert O200K.exact


def tokens(request: RecordedRequest) -> int:
    """A request's size by a real tokenizer (the run counts with the estimate, for a model named `text`;
    it errs high, so a request the run let through counts less here)."""
    return O200K.request(request.messages, request.tools or [])


def is_summariser(request: RecordedRequest) -> bool:
    return str(request.messages[0]["content"]).startswith(SUMMARY_PROMPT[:80])


@dataclass
class Model:
    """The model: it works turn by turn (`turn N: ...` → a tool call fetching data → `turn N done`),
    writes summaries when asked, and refuses any request larger than `window` tokens as a provider does."""

    window: int = BUDGET
    refuse: Callable[[RecordedRequest], bool] = lambda _request: False
    summariser_down: bool = False
    sizes: list[int] = field(default_factory=list[int])
    requests: list[RecordedRequest] = field(default_factory=list[RecordedRequest])
    summarised: list[RecordedRequest] = field(default_factory=list[RecordedRequest])

    def __call__(self, request: RecordedRequest) -> Reply:
        size = tokens(request)
        self.sizes.append(size)
        self.requests.append(request)
        if size > self.window or self.refuse(request):
            return Reply(
                status=400, error_code="context_length_exceeded", error_message="maximum context length exceeded"
            )
        if is_summariser(request) and self.summariser_down:
            return Reply(status=503, error_message="summariser unavailable")
        if is_summariser(request):
            self.summarised.append(request)
            covered = re.findall(r"turn (\d+):", request.messages[1]["content"])
            return Reply(text=f"Goal: the user's turns. Done: turns {', '.join(covered)}. Left: the next turn.")
        last = request.messages[-1]
        if last["role"] == "user":
            number = re.findall(r"turn (\d+)", str(last["content"]))[0]
            data = {"text": f"turn {number} data ", "times": 400}
            return Reply(tool_calls=(ToolCall("testing__echo", json.dumps(data), id=f"call_{number}"),))
        number = re.findall(r"turn (\d+)", str(last["content"]))[0]
        return Reply(text=f"turn {number} done")


def agent_runtime(root: Path, store: SqlStore, double: FunctionModel, **more: str) -> Runtime:
    files = app_files(double.base_url, limits="{max_turns: 10, timeout_s: 60}")
    files |= {"mcps/testing.yml": "command: python\nargs: [-m, tests.support.mcp_server]\n",
              "assistants/agent/assistant.yml": AGENT, **more}  # fmt: skip
    runtime = make_runtime(root / "app", store, files, model=double)
    runtime.tools = ToolManager(runtime.app.mcps, root=runtime.app.root, in_process={"testing": testing_server})
    return runtime


async def ask(rt: Runtime, number: int, chat_id: str = "c1") -> list[Event]:
    return await turn(rt, f"turn {number}: fetch the data", chat_id=chat_id, assistant="agent")
