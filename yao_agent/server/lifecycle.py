"""What a deployment asks of a server (CONTRACT §6, §8.3, §8.4): is it ready, and which app does it serve.

`GET /readyz` answers 503 while the server drains (SIGTERM) so that a load balancer sends new requests
elsewhere; `/healthz` (liveness) stays 200 to the end. `GET /api/app` shows a team admin the app version
being served and, when the files on disk did not validate, why they are not served.

The whole list of problems names every file of the app — hidden assistants, every connector — which is
the operator's to see (with an operator token; the server log and `yao-agent validate` have it all too).
A team admin sees the problems in the files of what it may use: the folders of the assistants whose
`access` admits it, their hook files, the connectors whose `access` admits it; the rest is a count.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import PurePosixPath

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from yao_agent import shapes
from yao_agent.dsl.specs import App
from yao_agent.errors import Forbidden
from yao_agent.identity import Identity
from yao_agent.server import schemas as doc
from yao_agent.server.auth import Caller
from yao_agent.server.errors import error_response
from yao_agent.server.native import runs_of
from yao_agent.server.reload import Reloader
from yao_agent.service.teams import ADMIN_TOKEN

router = APIRouter()
DRAINING = "this server is shutting down (draining its runs); send requests to another"


def reloader_of(request: Request) -> Reloader:
    return request.app.state.reloader


@router.get("/readyz", tags=["health"], response_model=None, responses=doc.answers(shapes.ReadyOut))
async def readyz(request: Request) -> Response:
    """Ready to take runs: 503 while draining (shutting down), else the app version it serves."""
    runs = runs_of(request)
    if runs.process.draining:
        return error_response(503, "unavailable", DRAINING, {"Retry-After": "1"})
    ready: shapes.ReadyOut = {"status": "ready", "app_version": runs.app.version}
    return JSONResponse(ready)


@router.head("/readyz", include_in_schema=False)
async def readyz_head(request: Request) -> Response:
    return await readyz(request)


@router.get("/api/app", tags=["app"], response_model=None, responses=doc.answers(shapes.AppStateOut, 401, 403))
async def app_state(request: Request, who: Caller) -> shapes.AppStateOut:
    """The app being served (its version, since when) and, when its files changed into something that does
    not validate, every problem as `file:line …` (the last good version keeps serving). Team admins (the
    problems of the files of what they may use) and the operator (every problem) only."""
    if not who.administers_team:
        raise Forbidden(f"only a team admin sees the app's state: use {ADMIN_TOKEN}")
    return reloader_of(request).view(readable(runs_of(request).app, who))


def readable(app: App, who: Identity) -> Callable[[str], bool]:
    """Whether a file of the app is one of what `who` may use (its problems are then theirs to see); the
    operator sees every file's."""
    if who.operator:
        return lambda _file: True
    assistants = {PurePosixPath(a.file).parent: a.id for a in app.assistants.values()}
    mine = set(app.assistants_for(who.user_id, who.team_id))
    files = {
        PurePosixPath(c.file) for c in app.connectors.values() if c.id in app.connectors_for(who.user_id, who.team_id)
    }
    files |= {PurePosixPath(a.hook) for a in app.assistants.values() if a.hook and a.id in mine}

    def shown(file: str) -> bool:
        path = PurePosixPath(file)
        if path in files:
            return True
        # the assistant whose folder holds the file (the deepest: one assistant's folder may hold another's)
        owner = next((assistants[f] for f in path.parents if f in assistants), None)
        return owner in mine

    return shown
