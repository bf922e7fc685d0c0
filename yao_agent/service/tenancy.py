"""Operating for many teams, as the HTTP API asks it: whose token a request carries (and the tokens
themselves: tokens.py), a team's role mappings, and its usage and budgets (CONTRACT §6 "Roles of
tokens", §8.2, §9.3).

Who sees and changes what is decided by the rules in teams.py, which the CLI (the trusted operator,
any scope) shares; this service applies them to a caller's identity and the app served now.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from yao_agent.dsl.refs import HANDFUL, unknown
from yao_agent.errors import NotFound, UsageError
from yao_agent.identity import Identity
from yao_agent.service import teams
from yao_agent.service.process import Process
from yao_agent.service.tokens import Tokens
from yao_agent.store.audit import actor_of
from yao_agent.store.protocol import TenancyStore
from yao_agent.store.records import RoleSetting

if TYPE_CHECKING:
    from yao_agent.shapes import BudgetsOut, UsageReportOut

ROLE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")  # app.yml's role names, within the store's 128


class Tenancy:
    """Tokens, role mappings, usage and budgets of the callers of the app `process` serves now."""

    def __init__(self, process: Process) -> None:
        self.process = process
        self.tokens = Tokens(process)

    @property
    def store(self) -> TenancyStore:
        return self.process.rt.store

    async def identity_for(self, token: str) -> Identity | None:
        """Whose API token this is; None for a token that is unknown or revoked (TokenExpired past its
        expiry). Its use is noted, at most once a minute, after the answer."""
        return await self.tokens.identity_for(token)

    # -- role mappings -----------------------------------------------------------------------------

    async def roles(self, identity: Identity) -> list[RoleSetting]:
        """The role mappings of the caller's team (or, for a caller without a team, the caller's own)."""
        return await self.store.list_roles(identity.settings_scope)

    async def set_role(self, identity: Identity, role: str, connectors: Sequence[str]) -> None:
        """Map a role for the caller's team (a team admin only: Forbidden for a member) or the caller without
        a team, to connectors the caller may use (their `access`): any other is unknown to them, in the
        words of one that does not exist."""
        if not ROLE.fullmatch(role):  # a malformed request is a 400 whoever sends it
            raise UsageError(f"invalid role name {role!r} (expected 1-128 letters, digits, _.-)")
        teams.require_admin(identity, "role mappings")  # a member hears nothing of the connectors
        allowed = self.process.app.connectors_for(identity.user_id, identity.team_id)
        for connector in connectors:
            if connector not in allowed:
                raise UsageError(unknown("connector", connector, allowed, HANDFUL))
        await self.store.set_role(identity.settings_scope, role, list(connectors), by=actor_of(identity))

    async def unset_role(self, identity: Identity, role: str) -> None:
        """Remove the scope's mapping of a role (app.yml's applies again); NotFound when it maps none,
        Forbidden for a member of a team."""
        teams.require_admin(identity, "role mappings")
        kind, owner = identity.settings_scope
        if not ROLE.fullmatch(role) or not await self.store.delete_role((kind, owner), role, by=actor_of(identity)):
            raise NotFound(f"role '{role}' is not set for {kind} {owner}")

    # -- usage and budgets (who sees and changes what: teams.py) -----------------------------------

    async def usage(
        self, identity: Identity, *, first: str | None = None, last: str | None = None, by: str = "day",
        user: str | None = None, team: str | None = None,
    ) -> UsageReportOut:  # fmt: skip
        """Usage and cost from day `first` to `last` (YYYY-MM-DD, both included; default: this month so far,
        UTC) grouped `by` day, assistant, connector, user or team: a member's own, a team admin's whole team
        (or one member's, `user`), the operator's any team's (`team`) or, by team, the whole deployment's.
        Forbidden for what the caller may not see."""
        grouping = teams.group(by)
        scope = teams.usage_scope(identity, user, grouping, team)
        start, end = teams.span(first, last, self.process.rt.clock())
        return await teams.usage_report(self.store, scope, start, end, grouping)

    async def budgets(self, identity: Identity, *, user: str | None = None, team: str | None = None) -> BudgetsOut:
        """The budgets that hold the caller's runs (a team admin: the team's, or one member's with `user`;
        the operator: any team's, `team`), with what was spent in each window and when it resets."""
        scope = teams.scope_for(identity, user, "budgets", team=team)
        rt = self.process.rt
        return await teams.budget_view(self.store, rt.app.config.budgets, scope, rt.clock())

    async def set_budget(
        self, identity: Identity, limits: Mapping[str, float | None], *, user: str | None = None,
        team: str | None = None,
    ) -> BudgetsOut:  # fmt: skip
        """Set windows of a budget (`per_day`, `per_month`: USD, or None for none there; the others stay):
        a team admin's team's, or one member's (`user`), at or below the operator's ceiling that holds it
        (Forbidden above it, or for none under one; and for a member, or a caller without a team); the
        operator's: the ceiling of any team (`team`) or user, as `yao-agent budgets set` does.
        Answers `budgets`."""
        scope = teams.changing_budget(identity, user, team)
        checked = teams.check_limits(limits)
        rt = self.process.rt
        if identity.operator:
            await rt.store.set_ceilings(scope.budget_scope, checked, by=actor_of(identity))
        else:
            allowed = teams.within_ceiling(scope, rt.app.config.budgets, checked)
            await self.store.set_budget(scope.budget_scope, checked, allowed, by=actor_of(identity))
        return await teams.budget_view(self.store, rt.app.config.budgets, scope, rt.clock())
