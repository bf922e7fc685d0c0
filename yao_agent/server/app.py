"""The HTTP server: the native API, the OpenAI-compatible API and the web page, over one `Runs` service."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles
from starlette.routing import Route

from yao_agent.dsl.specs import ServerSettings
from yao_agent.server import (
    anthropic_door,
    audit,
    errors,
    knowledge,
    lifecycle,
    metrics_route,
    native,
    oidc_web,
    openai_compat,
    operating,
    responses_door,
    schemas,
    tokens,
)
from yao_agent.server.access import AccessLog
from yao_agent.server.auth import Authenticate
from yao_agent.server.browser import BrowserHeaders
from yao_agent.server.limits import Admission, RequestBody
from yao_agent.server.oidc import Verifier
from yao_agent.server.reload import Reloader
from yao_agent.service.runs import Runs

WEB = Path(__file__).parent / "web"
ROUTERS = (native.router, operating.router, tokens.router, lifecycle.router, openai_compat.router,
           responses_door.router, knowledge.router, anthropic_door.router, audit.router, oidc_web.router)  # fmt: skip


def create_app(runs: Runs, settings: ServerSettings | None = None) -> FastAPI:
    """The app; `settings` default to app.yml's `server:`."""
    settings = settings or runs.app.config.server
    app = FastAPI(
        title="yao-agent",
        version="0.1.0",
        description="Assistants written in YAML, run through one streaming pipeline.",
    )
    app.state.runs = runs
    app.state.settings = settings
    app.state.reloader = Reloader(runs)  # (it watches the files only once `serve` starts it)
    app.state.oidc = Verifier(settings.oidc) if settings.oidc is not None else None
    errors.install(app)
    for router in ROUTERS:
        app.include_router(router)
    metrics_route.install(app)
    # The templates of the routes, for the access log to name a request's route by (routers included in an
    # app keep theirs to themselves).
    app.state.api_paths = [r.path for router in (*ROUTERS, metrics_route.router) for r in router.routes
                           if isinstance(r, Route)]  # fmt: skip
    app.mount("/static", StaticFiles(directory=WEB), name="static")

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:  # pyright: ignore[reportUnusedFunction]
        return FileResponse(WEB / "index.html")

    schemas.install(app)
    # Each one added wraps the ones before: a request meets AccessLog (which sees every answer, refusals
    # included), then BrowserHeaders (refusals carry them too: a page elsewhere reads why), then
    # AnthropicErrors (the Anthropic route's errors, the refusals below included, in Anthropic's shape), then
    # Admission, then Authenticate, then RequestBody.
    app.add_middleware(
        RequestBody,
        limit=settings.max_body_bytes,
        timeout_s=settings.body_timeout_s,
        upload_limit=settings.max_upload_bytes,
    )
    app.add_middleware(Authenticate, runs=runs, oidc=app.state.oidc)
    app.add_middleware(Admission, limit=settings.max_requests)
    app.add_middleware(anthropic_door.AnthropicErrors)
    app.add_middleware(BrowserHeaders, origins=settings.cors_origins)
    app.add_middleware(AccessLog)
    return app
