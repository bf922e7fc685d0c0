"""`connector: use::<role>` → the connectors to call, per team and user.

An explicit id is that connector or an error — never a silent substitute. A role goes through four
levels, first hit wins: (1) the role set for the caller's scope (the team's when the caller has a
team, else the user's), (2) the role in app.yml, (3) `default` for the caller's scope, (4) `default`
in app.yml. A level may map to an ordered list: a fallback chain.

A connector's `access` limits who may reach it through what a tenant chooses: a team's or user's setting
(levels 1 and 3) and a connector a Create hook picks. Links of such a setting the caller may not use are
skipped, and a setting left with none is an error; app.yml's roles and an assistant's own connector are
the operator's and apply as written. An error lists only connectors the caller may use, and few of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, Protocol

from yao_agent.dsl.envvars import resolve_env
from yao_agent.dsl.refs import HANDFUL, known_list
from yao_agent.dsl.specs import DEFAULT_ROLE, ROLE_PREFIX, App, ConnectorSpec
from yao_agent.errors import EnvVarMissing, ModelError
from yao_agent.identity import Identity

Level = Literal["explicit", "scoped_role", "app_role", "scoped_default", "app_default"]


class RoleSettings(Protocol):
    """Where scoped role settings live (the store)."""

    async def get_role(self, scope: tuple[str, str], role: str) -> tuple[str, ...] | None: ...


@dataclass(frozen=True, slots=True)
class KnownRoles:
    """One scope's role settings as read at the run's start (with its stage-1 checks, in their
    transaction): that scope's lookups are answered from them, any other's by `rest`. A run resolves
    against the settings of its start, whichever stage asks."""

    scope: tuple[str, str]
    roles: Mapping[str, tuple[str, ...]]
    rest: RoleSettings

    async def get_role(self, scope: tuple[str, str], role: str) -> tuple[str, ...] | None:
        if scope != self.scope:
            return await self.rest.get_role(scope, role)
        return self.roles.get(role)


def reads_roles(ref: str | None) -> bool:
    """Whether resolving `ref` may read a scope's role settings (only an explicit connector id never does)."""
    ref = (ref or "").strip()
    return not ref or ref.startswith(ROLE_PREFIX) or "$ENV." in ref


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
    *,
    from_app: bool = True,
) -> Resolution:
    """`from_app`: `ref` is written in the app's YAML (an assistant's `connector`), the only place where
    `$ENV` is resolved; a reference a hook, a request or a tenant supplies never is."""
    ref = (ref or "").strip() or ROLE_PREFIX + DEFAULT_ROLE
    if "$ENV." in ref:
        return await resolve_connectors(
            _from_environment(ref, from_app, app, environ), app, identity, settings, environ, from_app=from_app
        )
    if not ref.startswith(ROLE_PREFIX):
        spec = _connector(app, ref, f"connector '{ref}'", identity, checked=not from_app)
        return Resolution(ref, None, "explicit", "app", (spec,))
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
            found = tuple(_connector(app, i, origin, identity) for i in ids)
            return Resolution(ref, role, level, where, found if where == "app" else _allowed(found, origin, identity))
    raise ModelError(f'no connector resolved for role "{role}"', kind="config", connector=ref)


def _from_environment(ref: str, from_app: bool, app: App, environ: Mapping[str, str] | None) -> str:
    """The connector reference an app's `$ENV.NAME` names. Its value is never shown: an error says which
    variable was used, not what it holds (that would hand out the server's environment)."""
    if not from_app:
        raise ModelError("a connector given at run time cannot use $ENV (it is for the app's own YAML files)",
                         kind="config", connector="")  # fmt: skip
    try:
        resolved = resolve_env(ref, "connector", environ, secret=False)
    except EnvVarMissing as exc:
        raise ModelError(str(exc), kind="config", connector=ref) from None
    if "$ENV." in resolved or not (resolved.startswith(ROLE_PREFIX) or resolved in app.connectors):
        raise ModelError(f"connector '{ref}' names no connector or role of this app (its value is not shown)",
                         kind="config", connector=ref)  # fmt: skip
    return resolved


def _connector(app: App, connector_id: str, origin: str, identity: Identity, *, checked: bool = False) -> ConnectorSpec:
    """The connector of that id. `checked`: one the caller may not use is unknown to them (the same words, so
    an error never tells a tenant that a connector meant for others exists)."""
    spec = app.connectors.get(connector_id)
    if spec is None or (checked and not spec.access.allows(identity.user_id, identity.team_id)):
        known = known_list(app.connectors_for(identity.user_id, identity.team_id), HANDFUL)
        raise ModelError(f"{origin} names unknown connector '{connector_id}' (known: {known})",
                         kind="config", connector=connector_id)  # fmt: skip
    return spec


def _allowed(found: tuple[ConnectorSpec, ...], origin: str, identity: Identity) -> tuple[ConnectorSpec, ...]:
    """The links of a team's or user's setting the caller may use, or an error when there are none."""
    kept = tuple(c for c in found if c.access.allows(identity.user_id, identity.team_id))
    if kept:
        return kept
    if len(found) == 1:
        detail = f"{origin} names connector '{found[0].id}', which is not available to {identity}"
    else:
        names = ", ".join(f"'{c.id}'" for c in found)
        detail = f"{origin} names connectors {names}, none of which is available to {identity}"
    raise ModelError(detail, kind="config", connector=found[0].id)
