"""Which connectors embed for a collection, and for a caller of `/v1/embeddings`.

A collection's vectors and its queries' must come from one model, whoever searches it: so an app
collection's `embedding` is resolved as the operator wrote it (app.yml's roles, never a tenant's role
setting), and a team collection's in its team's scope (the team's own `embedding` role setting applies to
every member alike). A caller of `/v1/embeddings` gets their own `embedding` role, as for chat roles.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from yao_agent.connectors import Engines, resolve_connectors
from yao_agent.connectors.deltas import Embedded
from yao_agent.connectors.embedding import embed
from yao_agent.connectors.resolve import Resolution, RoleSettings
from yao_agent.dsl.specs import ROLE_PREFIX, App, ConnectorSpec
from yao_agent.errors import UsageError
from yao_agent.identity import Identity
from yao_agent.store.knowledge import CollectionRecord

EMBEDDING_ROLE = ROLE_PREFIX + "embedding"
_KEEPER = "knowledge"  # the identity a collection's embedder is resolved for (never a person)


class _AppOnly:
    """Role settings of nobody: an app collection's embedder is the app's, not a tenant's."""

    async def get_role(self, scope: tuple[str, str], role: str) -> tuple[str, ...] | None:
        return None


class Embedders:
    def __init__(self, app: App, engines: Engines, settings: RoleSettings, environ: Mapping[str, str] | None) -> None:
        self.app, self.engines, self.settings, self.environ = app, engines, settings, environ

    async def for_collection(self, collection: CollectionRecord, texts: Sequence[str]) -> Embedded:
        if collection.origin == "app":
            identity, settings, from_app = Identity(_KEEPER), _AppOnly(), True
        else:
            identity, settings, from_app = Identity(_KEEPER, collection.team_id), self.settings, False
        found = await resolve_connectors(collection.embedding, self.app, identity, settings, self.environ,
                                         from_app=from_app)  # fmt: skip
        return await embed(self.engines, _embedding(found), texts, self.environ)

    async def for_caller(self, identity: Identity, texts: Sequence[str]) -> Embedded:
        found = await resolve_connectors(EMBEDDING_ROLE, self.app, identity, self.settings, self.environ,
                                         from_app=False)  # fmt: skip
        return await embed(self.engines, _embedding(found), texts, self.environ)


def _embedding(found: Resolution) -> tuple[ConnectorSpec, ...]:
    """A role's connectors, unless the role is unset and only `default` (a chat model) answered for it."""
    if found.level in ("scoped_default", "app_default"):
        raise UsageError(f"role '{found.role}' is not set (expected it in app.yml's roles, or a team's role "
                         "setting, naming a connector that serves embeddings)")  # fmt: skip
    return found.connectors
