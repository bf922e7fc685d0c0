"""The HTTP server: the native API, the OpenAI-compatible API and the web page, over one runtime."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

from yao_agent.pipeline import Runtime
from yao_agent.server import errors, native, openai_compat, schemas
from yao_agent.server.auth import Authenticate

WEB = Path(__file__).parent / "web"


def create_app(rt: Runtime, *, max_body_bytes: int | None = None) -> FastAPI:
    app = FastAPI(
        title="yao-agent",
        version="0.1.0",
        description="Assistants written in YAML, run through one streaming pipeline.",
    )
    app.state.runtime = rt
    errors.install(app)
    app.include_router(native.router)
    app.include_router(openai_compat.router)
    app.mount("/static", StaticFiles(directory=WEB), name="static")

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:  # pyright: ignore[reportUnusedFunction]
        return FileResponse(WEB / "index.html")

    schemas.install(app)
    app.add_middleware(errors.BodyLimit, limit=max_body_bytes or rt.app.config.server.max_body_bytes)
    app.add_middleware(Authenticate, rt=rt)  # added last, so it runs first
    return app
