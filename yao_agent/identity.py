"""Who calls. Every run, chat and setting belongs to one identity; store calls refuse to run without one."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from yao_agent.errors import PermissionDenied

# No `/`: `access.users` writes a member of a team as `team/user`, which must name one identity only.
# (fullmatch, not match: `$` would also accept a trailing newline.)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@:+-]{0,127}")


@dataclass(frozen=True, slots=True)
class Identity:
    user_id: str
    team_id: str | None = None
    # A team admin (a token made with --admin) changes the team's role mappings and budgets and sees its
    # usage. It is not part of who the caller is: an admin's chats are the same person's chats.
    admin: bool = field(default=False, compare=False)
    # The operator (a token made with --operator) acts on every team: it sees the whole deployment's usage,
    # any team's budgets (and sets their ceilings) and makes tokens for anyone. It is not a team admin:
    # `admin` says that, apart. Like `admin`, it is not part of who the caller is.
    operator: bool = field(default=False, compare=False)
    # How the caller got in: an API token of ours, or a sign-in at the app's identity provider (a JWT or
    # the page's session). The audit log names the second `oidc`. Not part of who the caller is either.
    via: Literal["token", "oidc"] = field(default="token", compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.user_id, str) or not _NAME.fullmatch(self.user_id):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise PermissionDenied(f"invalid user id {self.user_id!r} (expected 1-128 letters, digits, _.@:+-)")
        if self.team_id is not None and not _NAME.fullmatch(self.team_id):
            raise PermissionDenied(f"invalid team id {self.team_id!r} (expected 1-128 letters, digits, _.@:+-)")

    @property
    def settings_scope(self) -> tuple[Literal["team", "user"], str]:
        """Whose role settings apply: the team's when the caller has one, else the user's (Yao's rule)."""
        return ("team", self.team_id) if self.team_id is not None else ("user", self.user_id)

    @property
    def administers_team(self) -> bool:
        """Whether the caller may change what is the whole team's (a caller without a team administers
        their own scope)."""
        return self.admin or self.team_id is None

    @property
    def kind(self) -> Literal["member", "admin", "operator"]:
        """What the caller's token makes it: the operator, a team admin, or a member."""
        return "operator" if self.operator else "admin" if self.admin else "member"

    def __str__(self) -> str:
        return f"{self.user_id}@{self.team_id}" if self.team_id else self.user_id


class Operator:
    """The trusted local operator (the CLI): may act across tenants. Code holds the one `OPERATOR`."""

    _instance: Operator | None = None

    def __new__(cls) -> Operator:
        cls._instance = cls._instance or super().__new__(cls)
        return cls._instance


OPERATOR = Operator()
