"""What a hook's `ctx` reaches: logging, sending messages, per-chat memory, calling another assistant,
searching the knowledge the caller may see.

Each method acts on the run the hook belongs to, with the run's identity: a hook can never read or
write another chat's memory or send into another run. What a hook logs is escaped and cut to one
line of the server log. The per-run limits (`hooks.host`) count every hook call of the run, its
children's included: they share the root run's `spend`. `ctx.call` runs its child through the run's
`children` (see `delegate.Children`), so nothing here imports the turn loop.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, cast

from yao_agent.base.jsonvalue import as_mapping
from yao_agent.dsl.specs import SearchSettings
from yao_agent.errors import UsageError
from yao_agent.events import MessageDelta, MessageEnd, MessageStart
from yao_agent.hooks import HookContext
from yao_agent.hooks.host import printable
from yao_agent.knowledge.references import numbered
from yao_agent.knowledge.search import Ask
from yao_agent.messages import ChatMessage, text_of
from yao_agent.pipeline.runtime import Runtime
from yao_agent.pipeline.state import RunState

hook_log = logging.getLogger("yao_agent.hook")
LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING, "warning": logging.WARNING,
          "error": logging.ERROR}  # fmt: skip


def snapshot(state: RunState) -> dict[str, Any]:
    return {
        "chat_id": state.chat_id,
        "assistant_id": state.assistant.id,
        "user_id": state.identity.user_id,
        "team_id": state.identity.team_id,
        "locale": state.locale,
        "metadata": state.metadata,
    }


def hook_context(rt: Runtime, state: RunState) -> HookContext:
    hook = state.assistant.hook or ""

    async def log(level: str, message: str) -> None:
        level_no = LEVELS.get(level.lower(), logging.INFO)
        hook_log.log(level_no, "%s (%s): %s", hook, state.assistant.id, printable(message),
                     extra={"source": "hook", "hook": hook})  # fmt: skip

    async def send(message: Any) -> str:
        return await send_message(rt, state, message)

    async def memory_get(key: str) -> Any:
        return await rt.store.memory_get(state.identity, state.chat_id, str(key))

    async def memory_set(key: str, value: Any) -> None:
        await rt.store.memory_set(state.identity, state.chat_id, str(key), value)

    async def call(assistant_id: str, messages: Any) -> Any:
        return await state.children.call(state, str(assistant_id), messages)

    async def search(query: str, options: Any) -> Any:
        return await search_for_hook(rt, state, query, options)

    return HookContext(snapshot(state), log, send, memory_get, memory_set, call, hook, state.root.spend, search)


async def search_for_hook(rt: Runtime, state: RunState, query: str, options: Any) -> list[Any]:
    """`ctx.search(query, {knowledge?, top_k?, filter?})`: the references the search step would give,
    numbered from 1, from the collections the caller may see (the assistant's own by default)."""
    given = as_mapping(options)
    if options is not None and not isinstance(options, Mapping):
        raise UsageError("ctx.search: options must be an object {knowledge?, top_k?, filter?}")
    settings = state.assistant.search or SearchSettings()
    names, top_k = given.get("knowledge", list(settings.knowledge)), given.get("top_k", settings.top_k)
    where: Any = given.get("filter") or {}
    if not isinstance(names, list) or not all(isinstance(n, str) for n in cast(list[Any], names)):
        raise UsageError("ctx.search: knowledge must be a list of collection ids")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= 50:
        raise UsageError("ctx.search: top_k must be a whole number from 1 to 50")
    if not isinstance(where, Mapping) or not all(isinstance(v, str) for v in cast(Mapping[str, Any], where).values()):
        raise UsageError("ctx.search: filter must map metadata keys to text values")
    chosen = {str(k): str(v) for k, v in cast(Mapping[str, Any], where).items()}
    ask = Ask(str(query), top_k, settings.min_score, chosen)
    found = await rt.knowledge.search(state.identity, [str(n) for n in cast(list[Any], names)], ask)
    return list(numbered(found))


async def send_message(rt: Runtime, state: RunState, message: Any) -> str:
    """A hook's own message: streamed as one start/delta/end and stored as an assistant message."""
    data = as_mapping(message)
    text = message if isinstance(message, str) else text_of(data.get("content", data.get("text", "")))
    kind = str(data.get("kind") or "text")
    message_id = rt.ids.new("msg")
    await state.emit(MessageStart(state.run_id, message_id, kind, state.thread_id))
    await state.emit(MessageDelta(state.run_id, message_id, kind, text=text, thread_id=state.thread_id))
    await state.emit(MessageEnd(state.run_id, message_id, kind, text, "completed", state.thread_id))
    state.buffer.add(ChatMessage(id=message_id, role="assistant", content=text, run_id=state.run_id,
                                 thread_id=state.thread_id, created_at=rt.clock(), hidden=True))  # fmt: skip
    return message_id
