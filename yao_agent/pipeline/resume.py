"""Resume: continue a chat's failed, cancelled or interrupted run from the step that did not finish —
or a `waiting` one, once a person has decided every call it waits for (approvals).

The user input is already stored (write-ahead), so a resume adds none; it runs the pipeline again
from the unfinished step and, when it completes, the chat's resume point is cleared.
"""

from __future__ import annotations

from yao_agent.errors import ApprovalConflict, NotFound, UsageError
from yao_agent.identity import Identity
from yao_agent.pipeline.runtime import Runtime
from yao_agent.pipeline.state import RunRequest
from yao_agent.store.records import ResumePoint


async def resume_point(rt: Runtime, identity: Identity, chat_id: str) -> ResumePoint | None:
    """The chat's resume point, None if it has none; NotFound if the caller has no such chat."""
    point = await rt.store.resume_point(identity, chat_id)
    if point is None and await rt.store.check_chat(identity, chat_id) is None:
        raise NotFound(f"no chat '{chat_id}'")
    return point


async def request(rt: Runtime, identity: Identity, chat_id: str, point: ResumePoint | None = None) -> RunRequest:
    """The request that continues the chat's resume point, as the assistant that made it (`point`: the one
    read already, in the transaction that changed it)."""
    point = point if point is not None else await resume_point(rt, identity, chat_id)
    if point is None:
        raise NotFound(f"chat '{chat_id}' has no resume point (its last run completed, or is still running)")
    if point.pending:  # a resume would run calls nobody approved
        names = ", ".join(f"{a.server}__{a.tool}" for a in point.pending)
        raise ApprovalConflict(
            f"chat '{chat_id}' waits for a person to approve {names}: decide with "
            f"POST /api/chats/{chat_id}/approvals or `yao-agent approve {chat_id}`"
        )
    if point.run.status == "waiting" and point.run.reason == "client_tools":  # a resume has no results to give
        raise ApprovalConflict(
            f"chat '{chat_id}' waits for the results of tools the client runs: send them (the assistant "
            "message and a `tool` message per call) in the next POST /v1/chat/completions on this chat"
        )
    if point.run.reason == "guardrail":  # asked again, what was blocked would be blocked again (or pass unchecked)
        raise UsageError(f"chat '{chat_id}': its last run was blocked by a guardrail and is not resumed; "
                         "send a new message instead")  # fmt: skip
    return RunRequest(assistant_id=point.run.assistant_id, identity=identity, chat_id=chat_id, resume=point)


def owned(request: RunRequest, identity: Identity) -> bool:
    """Whether the request resumes a run of the caller's own on its chat: the chat is theirs, then."""
    run = request.resume.run if request.resume is not None else None
    return (
        run is not None
        and run.chat_id == request.chat_id
        and (run.user_id, run.team_id) == (identity.user_id, identity.team_id)
    )
