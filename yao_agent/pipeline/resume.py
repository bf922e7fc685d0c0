"""Resume: continue a chat's failed, cancelled or interrupted run from the step that did not finish.

The user input is already stored (write-ahead), so a resume adds none; it runs the pipeline again
from the unfinished step and, when it completes, the chat's resume point is cleared.
"""

from __future__ import annotations

from yao_agent.errors import NotFound
from yao_agent.identity import Identity
from yao_agent.pipeline.handle import RunHandle
from yao_agent.pipeline.run import start
from yao_agent.pipeline.runtime import Runtime
from yao_agent.pipeline.state import RunRequest


async def start_resume(rt: Runtime, identity: Identity, chat_id: str) -> RunHandle:
    point = await rt.store.resume_point(identity, chat_id)
    if point is None:
        if await rt.store.check_chat(identity, chat_id) is None:
            raise NotFound(f"no chat '{chat_id}'")
        raise NotFound(f"chat '{chat_id}' has no resume point (its last run completed)")
    request = RunRequest(assistant_id=point.run.assistant_id, identity=identity, chat_id=chat_id, resume=point)
    return await start(rt, request)
