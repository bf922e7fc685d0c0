"""Answer versions: answer a chat's last user message again (regenerate), or change one of its user
messages and answer from there (edit).

Each is a run like any other (`Runs.start`), by the assistant the message was sent to, carrying a
`Rewind`: its write-ahead makes what it replaces an earlier version, kept and browsable but never sent to a
model again (store/versions.py). Everything a caller can get wrong is checked here first, so a bad request
is refused before anything exists: the chat is the caller's (404), it has a user message to answer (400),
the edited message is a current user message of it (404 when it has none of that id, else 400), the new
content is a message's content (400). A version never queues behind a run of its chat, whose answer it
would then replace unseen: a busy chat is the 409 of `on_busy: reject`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from yao_agent.errors import NotFound, UsageError
from yao_agent.identity import Identity
from yao_agent.messages import ChatMessage, user_content
from yao_agent.pipeline import permission
from yao_agent.pipeline.handle import RunHandle
from yao_agent.pipeline.state import RunRequest
from yao_agent.service.chats import Chats
from yao_agent.store.records import Rewind


class Versions:
    """Regenerate and edit on the caller's chats (`runs.versions`): each builds its run's request, checked,
    and starts it as `Runs.start` starts any run."""

    def __init__(self, chats: Chats, start: Callable[[RunRequest], Awaitable[RunHandle]]) -> None:
        self.chats = chats
        self.start = start

    async def regenerate(self, identity: Identity, chat_id: str, metadata: Mapping[str, Any] | None = None,
                         traceparent: str | None = None) -> RunHandle:  # fmt: skip
        """Answer the chat's last user message again; what followed it becomes an earlier version. UsageError
        when the chat has no user message, ChatBusy while a run of it is active."""
        chat_id = permission.chat_id_shape(chat_id)
        current = await self.chats.messages(identity, chat_id)
        asked = next((m for m in reversed(current) if _a_persons(m)), None)
        if asked is None:
            raise UsageError(f"chat '{chat_id}' has no user message to answer again")
        assistant_id = await _assistant_of(self.chats, identity, chat_id, asked)
        return await self.start(_request(identity, chat_id, assistant_id, (), Rewind(), metadata, traceparent))

    async def edit(self, identity: Identity, chat_id: str, message_id: str, content: object,
                   metadata: Mapping[str, Any] | None = None, traceparent: str | None = None) -> RunHandle:  # fmt: skip
        """Answer `content` in place of the user message `message_id`: that message and what followed it
        become an earlier version, and the new content is stored as the run's user message. NotFound for
        no such message, UsageError for one that is not a current user message or for content that is no
        message's, ChatBusy while a run of the chat is active."""
        chat_id = permission.chat_id_shape(chat_id)
        found = await self.chats.messages(identity, chat_id, versions=True)
        given = user_content(content, "content")
        edited = next((m for m in found if m.id == message_id), None)
        if edited is None:
            raise NotFound(f"chat '{chat_id}' has no message '{message_id}' (message_id)")
        if edited.replaced_by is not None:
            raise UsageError(f"message_id: message '{message_id}' is an earlier version (replaced by run "
                             f"'{edited.replaced_by}'); edit the current one")  # fmt: skip
        if not _a_persons(edited):
            raise UsageError(f"message_id: message '{message_id}' is not a user message (its role is "
                             f"{_role_of(edited)}); only a user message can be edited")  # fmt: skip
        assistant_id = await _assistant_of(self.chats, identity, chat_id, edited)
        asked = [{"role": "user", "content": given}]
        return await self.start(_request(identity, chat_id, assistant_id, asked, Rewind(message_id), metadata,
                                         traceparent))  # fmt: skip


def _a_persons(message: ChatMessage) -> bool:
    """A user message a person sent and a model saw: not hidden (a hook's turn, images refused), not the
    input a delegated run was given."""
    return message.role == "user" and message.thread_id is None and not message.hidden


def _role_of(message: ChatMessage) -> str:
    if message.role != "user":
        return message.role
    if message.hidden:  # a hook's hidden turn, or images no connector of its assistant could read
        return "user, but one never sent to a model (a hook's turn, or images the assistant cannot read)"
    return "user, but a delegated run's input"


async def _assistant_of(chats: Chats, identity: Identity, chat_id: str, message: ChatMessage) -> str:
    """The assistant the message was sent to: its run's (a chat may have been continued by several)."""
    view = await chats.store.run_view(identity, chat_id, message.run_id) if message.run_id else None
    if view is not None:
        return view.run.assistant_id
    chat = await chats.store.get_chat(identity, chat_id)
    if chat is None:
        raise NotFound(f"no chat '{chat_id}'")
    return chat.assistant_id


def _request(identity: Identity, chat_id: str, assistant_id: str, messages: Sequence[Mapping[str, Any]],
             rewind: Rewind, metadata: Mapping[str, Any] | None, traceparent: str | None) -> RunRequest:  # fmt: skip
    return RunRequest(assistant_id, identity, messages, chat_id=chat_id, metadata=metadata or {}, on_busy="reject",
                      chat_must_exist=True, traceparent=traceparent, rewind=rewind)  # fmt: skip
