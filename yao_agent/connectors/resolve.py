"""`connector: use::<role>` → the connectors to call, per team and user.

An explicit id is that connector or an error — never a silent substitute. A role goes through four
levels, first hit wins: (1) the role set for the caller's scope (the team's when the caller has a
team, else the user's), (2) the role in app.yml, (3) `default` for the caller's scope, (4) `default`
in app.yml. A level may map to an ordered list: a fallback chain.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, Protocol

from yao_agent.dsl.envvars import resolve_env
from yao_agent.dsl.refs import known_list
from yao_agent.dsl.specs import DEFAULT_ROLE, ROLE_PREFIX, App, ConnectorSpec
from yao_agent.errors import EnvVarMissing, ModelError
from yao_agent.identity import Identity

Level = Literal["explicit", "scoped_role", "app_role", "scoped_default", "app_default"]


class RoleSettings(Protocol):
    """Where scoped role settings live (the store)."""

    async def get_role(self, scope: tuple[str, str], role: str) -> tuple[str, ...] | None: ...


@dataclass(frozen=True, slots=True)
class Resolution:
    ref: str
    role: str | None
    level: Level
    scope: str  # whose setting won: "team:acme", "user:u1" or "app"
    connectors: tuple[ConnectorSpec, ...]

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(c.id for c in self.connectors)


async def resolve_connectors(
    ref: str | None,
    app: App,
    identity: Identity,
    settings: RoleSettings,
    environ: Mapping[str, str] | None = None,
) -> Resolution:
    ref = (ref or "").strip() or ROLE_PREFIX + DEFAULT_ROLE
    if "$ENV." in ref:
        try:
            ref = resolve_env(ref, "connector", environ)
        except EnvVarMissing as exc:
            raise ModelError(str(exc), kind="config", connector=ref) from None
    if not ref.startswith(ROLE_PREFIX):
        return Resolution(ref, None, "explicit", "app", (_connector(app, ref, f"connector '{ref}'"),))
    role = ref.removeprefix(ROLE_PREFIX) or DEFAULT_ROLE
    kind, owner = identity.settings_scope
    scoped = f"{kind}:{owner}"
    levels: list[tuple[Level, str, str]] = [
        ("scoped_default", DEFAULT_ROLE, scoped),
        ("app_default", DEFAULT_ROLE, "app"),
    ]
    if role != DEFAULT_ROLE:
        levels = [("scoped_role", role, scoped), ("app_role", role, "app"), *levels]
    for level, name, where in levels:
        ids = await settings.get_role((kind, owner), name) if where != "app" else app.config.roles.get(name)
        if ids:
            origin = f"role '{name}' of {where}"
            return Resolution(ref, role, level, where, tuple(_connector(app, i, origin) for i in ids))
    raise ModelError(f'no connector resolved for role "{role}"', kind="config", connector=ref)


def _connector(app: App, connector_id: str, origin: str) -> ConnectorSpec:
    spec = app.connectors.get(connector_id)
    if spec is None:
        detail = f"{origin} names unknown connector '{connector_id}' (known: {known_list(app.connectors)})"
        raise ModelError(detail, kind="config", connector=connector_id)
    return spec
