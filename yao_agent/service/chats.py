"""What callers ask about their chats, as stored: the list, the messages, a run's view, what waits for
a person or a resume; and the two changes a chat's owner makes (a title, its deletion).

Nothing here starts a run (runs.py does). Who owns a chat is the store's to check, with the caller's
identity on every query: another's chat is one that does not exist.
"""

from __future__ import annotations

from yao_agent.dsl.specs import AssistantSpec
from yao_agent.errors import ChatBusy, NotFound
from yao_agent.identity import Identity
from yao_agent.messages import ChatMessage
from yao_agent.pipeline import permission, resume
from yao_agent.service.process import Process
from yao_agent.store.protocol import ChatQueries
from yao_agent.store.records import ChatRecord, ResumePoint, RunView


class Chats:
    """The caller's chats and the assistants they may use, in the app `process` serves now."""

    def __init__(self, process: Process) -> None:
        self.process = process

    @property
    def store(self) -> ChatQueries:
        return self.process.rt.store

    def assistants(self, identity: Identity) -> list[AssistantSpec]:
        """The assistants the caller may use; to anybody else an assistant does not exist."""
        found = self.process.app.assistants.values()
        return [a for a in found if a.access.allows(identity.user_id, identity.team_id)]

    async def listed(self, identity: Identity, query: str = "") -> list[ChatRecord]:
        """The caller's chats, most recently active first; `query` keeps those whose title or messages contain it."""
        return await self.store.list_chats(identity, query=query)

    async def check(self, identity: Identity, chat_id: str) -> None:
        """NotFound unless the caller has a chat of this id."""
        if await self.store.check_chat(identity, chat_id) is None:  # NotFound already if another's
            raise NotFound(f"no chat '{chat_id}'")

    async def messages(self, identity: Identity, chat_id: str, *, versions: bool = False) -> list[ChatMessage]:
        """The chat's current messages, oldest first; with `versions`, the earlier versions (replaced by a
        regeneration or an edit) too, each in its place, with the run that replaced it."""
        chat_id = permission.chat_id_shape(chat_id)
        await self.check(identity, chat_id)
        return await self.store.history(identity, chat_id, versions=versions)

    async def resume_point(self, identity: Identity, chat_id: str) -> ResumePoint:
        """What a resume would continue: the chat's latest run, if it did not complete, and its unfinished steps."""
        point = await resume.resume_point(self.process.rt, identity, permission.chat_id_shape(chat_id))
        if point is None:
            raise NotFound(f"chat '{chat_id}' has no resume point")
        if point.pending:
            raise NotFound(f"chat '{chat_id}' has no resume point: its run waits for approvals (see its approvals)")
        return point

    async def approvals(self, identity: Identity, chat_id: str) -> ResumePoint:
        """The run of the caller's chat that waits for a person, with its pending calls; NotFound if none."""
        chat_id = permission.chat_id_shape(chat_id)
        point = await resume.resume_point(self.process.rt, identity, chat_id)
        if point is None or not point.pending:
            raise NotFound(f"chat '{chat_id}' has no pending approvals")
        return point

    async def run_view(self, identity: Identity, chat_id: str, run_id: str) -> RunView:
        """One run of the caller's chat: its status, reason, usage and steps (with their transitions)."""
        chat_id = permission.chat_id_shape(chat_id)
        found = None
        if permission.CHAT_ID.fullmatch(run_id):  # run ids have the chat ids' shape; another is no run
            found = await self.store.run_view(identity, chat_id, run_id)
        if found is None:
            raise NotFound(f"chat '{chat_id}' has no run '{run_id}'")
        return found

    async def run_views(self, identity: Identity, chat_id: str) -> list[RunView]:
        """Every run of the caller's chat, oldest first, as `run_view` shows each."""
        chat_id = permission.chat_id_shape(chat_id)
        await self.check(identity, chat_id)
        listed = await self.store.runs_of(identity, chat_id)
        return [view for r in reversed(listed) if (view := await self.store.run_view(identity, chat_id, r.id))]

    async def rename(self, identity: Identity, chat_id: str, title: str) -> ChatRecord:
        """Give the caller's chat a title of their own (1-200 characters of plain text on one line)."""
        return await self.store.rename_chat(identity, permission.chat_id_shape(chat_id), title)

    async def delete(self, identity: Identity, chat_id: str) -> None:
        """Delete the chat and everything stored for it; ChatBusy while a run of it is active (here or, on
        PostgreSQL, in another process)."""
        chat_id = permission.chat_id_shape(chat_id)
        if self.process.running(identity, chat_id) or not await self.store.delete_chat(identity, chat_id):
            raise ChatBusy(f"chat '{chat_id}' has a run in progress: cancel it or let it end, then delete the chat")
