"""`GET /metrics` (CONTRACT §6, §8.1): the Prometheus text exposition, for a scraper rather than a user.

It takes no user token (it is in `auth.PUBLIC`): a Prometheus server has none, and the metrics name no
user. When `YAO_AGENT_METRICS_TOKEN` is set the scraper must send exactly that one as its bearer token
(Prometheus' `authorization: {credentials: ...}`); read per request, so a changed token needs no restart.
"""

from __future__ import annotations

import hmac
import os

from fastapi import APIRouter, FastAPI, Request, Response

from yao_agent import settings
from yao_agent.observe import metrics
from yao_agent.server.auth import token_of
from yao_agent.server.errors import unauthorized

TOKEN_ENV = settings.METRICS_TOKEN
router = APIRouter()


def install(app: FastAPI) -> None:
    """Serve /metrics, and count from now on in this process (the CLI's runs are never counted)."""
    metrics.enable()
    app.include_router(router)


# Not in the OpenAPI document: that describes the JSON API for its clients (bearer, error bodies), and a
# scraper is configured from the docs (docs/guides/observing.md), not from it.
@router.get("/metrics", include_in_schema=False)
async def scrape(request: Request) -> Response:
    wanted = os.environ.get(TOKEN_ENV)
    if wanted:
        given = token_of(request.headers.get("authorization", "")) or ""
        if not hmac.compare_digest(given.encode(), wanted.encode()):  # in constant time: no guessing by timing
            return unauthorized(f"missing or wrong metrics token (expected the bearer token in ${TOKEN_ENV})")
    body, content_type = metrics.scrape()
    return Response(body, media_type=content_type)
