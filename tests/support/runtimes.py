"""A runtime for an app on disk whose model is a double; run a turn and look at what it streamed and stored.

The loop tests' model is the in-process `ScriptedModel`: it stands in for the provider engines, so
everything of a model call but the provider and its SDK runs, without HTTP. Tests of what goes over the
wire take the loopback `FakeProvider`. Both take the same `Reply` scripts and record `requests` alike:
a test moves from one to the other by the fixture it asks for and the model it gives `make_runtime`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.apps import make_app
from yao_agent.connectors import Engines, RetryPolicy
from yao_agent.dsl import load_app
from yao_agent.events import Event, StreamEnd
from yao_agent.identity import Identity
from yao_agent.ids import CountingIds
from yao_agent.pipeline import RunRequest, Runtime
from yao_agent.service.runs import Runs
from yao_agent.store import SqlStore
from yao_agent.testing import FakeProvider, ModelDouble

CHAT = "name: Chat\nprompts:\n  - {role: system, content: 'You are {{ assistant.name }}.'}\n"
ALICE = Identity("alice")
_RUNS: dict[Runtime, Runs] = {}  # the latest few runtimes' (a test uses one or two; older ones are let go)


def app_files(base_url: str, *, limits: str = "{max_turns: 10, timeout_s: 30}") -> dict[str, str]:
    return {
        "app.yml": f"roles:\n  default: fake.model\nhistory_size: 20\nlimits: {limits}\n",
        "connectors/fake/model.yml": f"type: openai\nmodel: text\nbase_url: {base_url}\napi_key: sk-x\ntimeout_s: 5\n",
        "assistants/chat/assistant.yml": CHAT,
    }


async def no_sleep(_seconds: float) -> None:
    return None


def make_runtime(
    root: Path, store: SqlStore, files: dict[str, str], *, model: ModelDouble | FakeProvider | None = None
) -> Runtime:
    """A runtime for the app `files`, whose model is `model`: an in-process double is its engines, the
    loopback fake provider (or None) is reached over HTTP at the `base_url` its connectors name."""
    if model is None and any(ModelDouble.base_url in text for text in files.values()):
        raise AssertionError("the app's connectors name the in-process model: pass it, make_runtime(..., model=fake)")
    engines = model.engines() if isinstance(model, ModelDouble) else Engines()
    app = load_app(make_app(root, files, base={}))
    return Runtime(app=app, store=store, engines=engines, ids=CountingIds(), sleep=no_sleep,
                   retry=RetryPolicy(max_attempts=1))  # fmt: skip


def runs_of(rt: Runtime) -> Runs:
    """The one `Runs` of a test's runtime, as a process has one: its runs share one admission (queues, cancels)."""
    if rt not in _RUNS:
        _RUNS[rt] = Runs(rt)
        while len(_RUNS) > 8:
            del _RUNS[next(iter(_RUNS))]
    return _RUNS[rt]


async def turn(
    rt: Runtime, text: str | list[dict[str, Any]], chat_id: str = "c1", who: Identity = ALICE, assistant: str = "chat"
) -> list[Event]:
    messages = [{"role": "user", "content": text}] if isinstance(text, str) else text
    return [e async for e in runs_of(rt).stream(RunRequest(assistant, who, messages, chat_id=chat_id))]


def end_of(events: list[Event]) -> StreamEnd:
    last = events[-1]
    assert isinstance(last, StreamEnd), last
    return last


async def stored(rt: Runtime, chat_id: str = "c1", who: Identity = ALICE) -> list[tuple[str, Any, str]]:
    """(role, content, status) of every stored message, in order."""
    return [(m.role, m.content, m.status) for m in await rt.store.history(who, chat_id)]


async def close(rt: Runtime) -> None:
    """Let go of what a runtime a test made itself started: its engines' clients, hook workers, tool servers."""
    await rt.engines.aclose()
    await rt.hooks.aclose()
    await rt.tools.aclose()
