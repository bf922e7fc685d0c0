"""Hooks run in real V8: a host double for `ctx`, and helpers to write a hook file and call it, alone or in an app."""

from __future__ import annotations

import asyncio
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support.runtimes import app_files
from yao_agent.dsl.specs import HookPolicy
from yao_agent.errors import HookError
from yao_agent.hooks import HookCall, HookContext, HookRunner
from yao_agent.pipeline import Runtime
from yao_agent.testing import ScriptedModel

SNAPSHOT = {"chat_id": "chat_1", "assistant_id": "concierge", "user_id": "u1", "team_id": "t1", "locale": "en",
            "metadata": {"channel": "web", "tags": ["a"]}}  # fmt: skip


FAST = HookPolicy(timeout_ms=300, memory_mb=32)


@dataclass
class Host:
    """The host side of ctx: records what the hook asked for and answers like the pipeline would."""

    calls: list[tuple[Any, ...]] = field(default_factory=list[tuple[Any, ...]])
    memory: dict[str, Any] = field(default_factory=dict[str, Any])
    fail_with: Exception | None = None

    def context(self, snapshot: dict[str, Any] | None = None) -> HookContext:
        async def log(level: str, message: str) -> None:
            self.calls.append(("log", level, message))

        async def send(message: Any) -> str:
            self.calls.append(("send", message))
            return f"msg_{len(self.calls)}"

        async def memory_get(key: str) -> Any:
            self.calls.append(("memory_get", key))
            return self.memory.get(key)

        async def memory_set(key: str, value: Any) -> None:
            self.calls.append(("memory_set", key, value))
            self.memory[key] = value

        async def call(assistant_id: str, messages: Any) -> Any:
            self.calls.append(("call", assistant_id, messages))
            if self.fail_with is not None:
                raise self.fail_with
            await asyncio.sleep(0)
            return {"assistant_id": assistant_id, "content": f"child saw {len(messages)} messages"}

        return HookContext(dict(snapshot or SNAPSHOT), log, send, memory_get, memory_set, call, "hooks/hook.js")


def write(folder: Path, source: str, name: str = "hook.js") -> Path:
    path = folder / name
    path.write_text(source, encoding="utf-8")
    return path


async def create(
    runner: HookRunner, path: Path, host: Host, *args: Any, policy: HookPolicy = FAST, function: str = "Create"
) -> HookCall:
    return await runner.call(path, f"hooks/{path.name}", function, list(args), host.context(), policy)


async def failure(runner: HookRunner, path: Path, host: Host, *args: Any, policy: HookPolicy = FAST) -> HookError:
    with pytest.raises(HookError) as caught:
        await create(runner, path, host, *args, policy=policy)
    assert caught.value.file == f"hooks/{path.name}"
    assert caught.value.function == "Create"
    return caught.value


ECHO = "type: scripted\nrules:\n  - reply: 'echo: {{ last_user }}'\n"


def hooked(fake: ScriptedModel, hook: str, assistant: str = "", more: dict[str, str] | None = None) -> dict[str, str]:
    files = app_files(fake.base_url)
    files["hooks/h.js"] = textwrap.dedent(hook)
    files["assistants/hooked/assistant.yml"] = assistant or (
        "name: Hooked\nhook: hooks/h.js\nhook_policy: {timeout_ms: 300, memory_mb: 16}\n"
        "prompt_presets:\n  terse: [{role: system, content: 'Be terse.'}]\n"
    )
    files["connectors/demo/echo.yml"] = ECHO
    return {**files, **(more or {})}


Make = Callable[..., Runtime]
