"""The audit log (CONTRACT §9.3): every change of tokens, role mappings, budgets, knowledge collections
and documents, approval decisions and app reloads is one row, written in the transaction of the change
(`append`), so that neither can be stored without the other.

Rows are numbered 1, 2, … without a gap, and each row's `hash` is the sha256 of a canonical JSON of its
fields and the hash of the row before (`prev_hash`): a row edited in the database no longer matches its
hash, a row removed leaves a gap and breaks the next row's link, and the chain's head (`audit_head`: the
last row's number and hash) catches rows removed from the end. `verify` walks the chain and names the
first row where it breaks.

Appending reads and moves the head: on PostgreSQL under a row lock on it (`FOR UPDATE`), so two
writers — two processes — never chain onto the same row; SQLite's write lock, taken when a writing
transaction begins, serialises them already.

Secrets are never stored: a token is named by its public id, and whatever looks like a secret in a
row — a value under a key such as `token` or `password`, a token, an API key, a bearer credential or a
JWT in any text — is replaced by `[redacted]` before the row is hashed and written.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from sqlalchemy import bindparam, func, select, update
from sqlalchemy.sql import ClauseElement

from yao_agent.errors import Forbidden, PermissionDenied, UsageError
from yao_agent.identity import Identity, Operator
from yao_agent.messages import iso_time
from yao_agent.store.engine import Database
from yao_agent.store.schema import audit, audit_head, tokens
from yao_agent.store.spelled import Spelled, conflict_insert
from yao_agent.store.tx import Sql, Tx

if TYPE_CHECKING:
    from yao_agent.shapes import AuditActorOut, AuditRowOut

T = TypeVar("T")
ActorKind = Literal["member", "admin", "operator", "cli", "oidc"]
REDACTED = "[redacted]"
# What may be asked for by `action`: each action written, and each family of them (`kb` is every kb.* one).
ACTIONS = (
    "token.create", "token.revoke", "role.set", "role.unset", "budget.set", "budget.ceiling",
    "kb.collection.create", "kb.collection.declare", "kb.document.add", "kb.document.delete",
    "approval.decide", "app.reload",
)  # fmt: skip
FAMILIES = tuple(sorted({a.rsplit(".", n)[0] for a in ACTIONS for n in (1, 2) if a.count(".") >= n}))
BATCH = 1000  # rows read at a time by `verify`


@dataclass(frozen=True, slots=True)
class Actor:
    """Who made a change: a person (their user and team), the CLI, or the deployment itself."""

    kind: ActorKind
    user_id: str | None = None
    team_id: str | None = None


CLI = Actor("cli")  # the trusted local operator (`yao-agent …` with the database at hand)
# The deployment's own changes, made by whoever may edit its files: a reload, the app's collections declared.
DEPLOYMENT = Actor("operator")


def actor_of(caller: Identity | Operator) -> Actor:
    """Who a change is by, from the caller the change was asked by: the one place this is decided.

    The CLI's `Operator` is `cli`; someone signed in at the identity provider is `oidc`; a token's
    identity is its kind: `admin` or `member`, or `operator` for an operator token's.
    """
    if isinstance(caller, Operator):
        return CLI
    return Actor(_kind(caller), caller.user_id, caller.team_id)


def _kind(identity: Identity) -> ActorKind:
    if identity.via == "oidc":
        return "oidc"
    if identity.operator:
        return "operator"
    return "admin" if identity.admin else "member"


@dataclass(frozen=True, slots=True)
class Change:
    """What one row records: the action, what it changed, the team that is about ('' none), and the
    thing before and after (None where there was or is none)."""

    action: str
    target: str
    team_id: str = ""
    before: Any = None
    after: Any = None


@dataclass(frozen=True, slots=True)
class AuditRow:
    id: int
    at: float
    actor: Actor
    team_id: str
    action: str
    target: str
    before: Any
    after: Any
    hash: str
    prev_hash: str


@dataclass(frozen=True, slots=True)
class Broken:
    """Where the chain breaks: the first row that does not hold, and why."""

    row: int
    reason: str


@dataclass(frozen=True, slots=True)
class Verified:
    count: int  # rows checked (all of them when intact)
    head: str  # the last row's hash: written down elsewhere, it proves later that no row was rewritten
    broken: Broken | None = None


@dataclass(frozen=True, slots=True)
class AuditSight:
    """Whose rows a caller reads: every row (`team_id` and `user_id` None: the operator), a team's — rows
    whose actor is of the team or that change something of it —, or a user's without a team (their own)."""

    team_id: str | None = None
    user_id: str | None = None

    @property
    def shape(self) -> str:
        return "team" if self.team_id is not None else "user" if self.user_id is not None else "all"


EVERYONE = AuditSight()


def sight_for(caller: Identity | Operator) -> AuditSight:
    """Who reads which rows: the operator every row; a team admin their team's; a caller without a team
    their own changes; a member of a team none (Forbidden)."""
    if isinstance(caller, Operator) or actor_of(caller).kind == "operator":
        return EVERYONE
    if caller.team_id is None:
        return AuditSight(user_id=caller.user_id)
    if not caller.admin:
        raise Forbidden(f"only a team admin reads team {caller.team_id}'s audit log")
    return AuditSight(team_id=caller.team_id)


# --- secrets --------------------------------------------------------------------------------------

SECRET_KEYS = re.compile(
    r"(?i)^(token|secret|password|passwd|passphrase|api[_-]?key|authorization|cookie|hash|token_hash"
    r"|client_secret|access_token|refresh_token|id_token|private_key|credentials?)$"
)
SECRET_TEXT = re.compile(
    r"ya_[A-Za-z0-9_-]{16,}"  # a token of ours (its 12-character prefix alone is public)
    r"|sk-[A-Za-z0-9_-]{16,}"  # an API key of the usual providers' shape
    r"|(?i:bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}"  # a credential as an Authorization header carries it
    r"|eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"  # a JWT
)


def scrub(value: Any) -> Any:
    """The value as a row may hold it: JSON's own types, secrets replaced (see the module's docstring)."""
    if isinstance(value, str):
        return SECRET_TEXT.sub(REDACTED, value.replace("\x00", ""))
    if isinstance(value, Mapping):
        given = cast(Mapping[Any, Any], value)
        return {str(k): REDACTED if SECRET_KEYS.match(str(k)) and v is not None else scrub(v) for k, v in given.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [scrub(v) for v in cast(Sequence[Any], value)]
    if value is None or isinstance(value, bool | int | float):
        return value
    return scrub(str(value))


# --- the chain ------------------------------------------------------------------------------------

HEAD = Sql(select(audit_head.c.seq, audit_head.c.hash).where(audit_head.c.id == 1).with_for_update())
PLAIN_HEAD = Sql(select(audit_head.c.seq, audit_head.c.hash).where(audit_head.c.id == 1))
MOVE_HEAD = Sql(update(audit_head).where(audit_head.c.id == 1), columns=("seq", "hash"))
INSERT_ROW = Sql(audit.insert())
LAST_ACTION = Sql(
    select(audit.c.after).where(audit.c.action == bindparam("action")).order_by(audit.c.id.desc()).limit(1)
)
ROWS_AFTER = Sql(
    select(audit).where(audit.c.id > bindparam("after"), audit.c.id <= bindparam("last")).order_by(audit.c.id)
    .limit(BATCH)
)  # fmt: skip
PAST = Sql(select(func.min(audit.c.id)).where(audit.c.id > bindparam("last")))


def _new_head(dialect: str) -> ClauseElement:
    """The head's row made again where it is missing (a database emptied by hand): of two writers, one
    makes it and the other then finds it (each database spells it its own way)."""
    return conflict_insert(dialect, audit_head).on_conflict_do_nothing(index_elements=["id"])


NEW_HEAD = Sql(Spelled(_new_head), columns=("id", "seq", "hash"))
HASHED = ("id", "at", "actor_user_id", "actor_team_id", "actor_kind", "team_id", "action", "target", "before",
          "after", "prev_hash")  # fmt: skip


def digest(row: Mapping[str, Any]) -> str:
    """A row's hash: sha256 of the canonical JSON (keys sorted, no spaces) of its fields and `prev_hash`."""
    fields = {name: row[name] for name in HASHED}
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _stored(value: Any) -> Any:
    """The value as the database gives it back (JSON's types: a tuple is read back as a list), secrets out."""
    return None if value is None else json.loads(json.dumps(scrub(value), allow_nan=False))


def _locked_head(tx: Tx) -> tuple[int, str]:
    found = tx.tuples(HEAD)
    if not found:
        tx.execute(NEW_HEAD, {"id": 1, "seq": 0, "hash": ""})
        found = tx.tuples(HEAD)
    seq, last = found[0]
    return int(seq), str(last)


def append(tx: Tx, by: Actor, change: Change, now: float) -> AuditRow:
    """Write one row for `change`, by `by`, at the end of the chain, in the transaction `tx` of the change."""
    seq, prev = _locked_head(tx)
    row: dict[str, Any] = {
        "id": seq + 1, "at": float(now), "actor_user_id": by.user_id, "actor_team_id": by.team_id,
        "actor_kind": by.kind, "team_id": change.team_id, "action": change.action, "target": scrub(change.target),
        "before": _stored(change.before), "after": _stored(change.after), "prev_hash": prev,
    }  # fmt: skip
    row["hash"] = digest(row)
    tx.execute(MOVE_HEAD, {"seq": row["id"], "hash": row["hash"]})
    tx.execute(INSERT_ROW, dict(row))  # (a copy: the statement takes over the dict it is given)
    return _row(row)


def logged(
    work: Callable[[Tx], T], by: Actor, change: Change | Callable[[Tx, T], Sequence[Change]], now: float
) -> Callable[[Tx], T]:
    """`work` (a write transaction's body) followed, in the same transaction, by its audit rows: `change`,
    or those a function of the transaction and the work's result finds (none: nothing changed)."""

    def run(tx: Tx) -> T:
        done = work(tx)
        for one in [change] if isinstance(change, Change) else change(tx, done):
            append(tx, by, one, now)
        return done

    return run


# --- what rows say of tokens (named by their public id: never the secret, nor its hash) -------------

TOKEN_FIELDS = ("id", "user_id", "team_id", "admin", "operator", "label", "expires_at")
REVOKED_NOW = Sql(
    select(*(tokens.c[name] for name in TOKEN_FIELDS)).where(
        (tokens.c.hash == bindparam("hash"))
        | (tokens.c.prefix == bindparam("prefix"))
        | (tokens.c.id == bindparam("id")),
        tokens.c.revoked_at == bindparam("revoked_at"),
    )
)


def token_made(values: Mapping[str, Any]) -> Change:
    """The row of a token made (`values`: its row in `tokens`)."""
    shown = {name: values[name] for name in TOKEN_FIELDS}
    return Change("token.create", f"token/{values['id']}", values["team_id"], None, shown)


def tokens_revoked(params: Mapping[str, Any]) -> Callable[[Tx, int], list[Change]]:
    """The rows of the tokens a revocation (`params`: its statement's) revoked, read in its transaction."""

    def found(tx: Tx, count: int) -> list[Change]:
        if not count:
            return []
        revoked = tx.all(REVOKED_NOW, {name: params[name] for name in ("hash", "prefix", "id", "revoked_at")})
        return [Change("token.revoke", f"token/{r.id}", r.team_id, {**r._asdict(), "revoked": False},
                       {**r._asdict(), "revoked": True}) for r in revoked]  # fmt: skip

    return found


def last_after(tx: Tx, action: str) -> Any:
    """The `after` of the newest row of `action` (None without one)."""
    found = tx.tuples(LAST_ACTION, {"action": action})
    return found[0][0] if found else None


def verify(tx: Tx) -> Verified:
    """Walk the chain up to its head and name the first row that does not hold."""
    head = tx.tuples(PLAIN_HEAD)
    last, head_hash = (int(head[0][0]), str(head[0][1])) if head else (0, "")
    expected, prev = 1, ""
    while batch := tx.all(ROWS_AFTER, {"after": expected - 1, "last": last}):
        for row in batch:
            broken = _check(row._asdict(), expected, prev)
            if broken is not None:
                return Verified(expected - 1, prev, broken)
            expected, prev = expected + 1, row.hash
    count = expected - 1
    if count < last:
        gone = f"row {count + 1}" if count + 1 == last else f"rows {count + 1} to {last}"
        return Verified(count, prev, Broken(count + 1, f"{gone} missing: the chain's head names row {last}"))
    if prev != head_hash:
        return Verified(count, prev, Broken(count, "its hash is not the one the chain's head names"))
    past = tx.scalar(PAST, {"last": last})
    if past is not None:
        return Verified(count, prev, Broken(int(past), f"not in the chain: its head names row {last} as the last"))
    return Verified(count, prev)


def _check(row: Mapping[str, Any], expected: int, prev: str) -> Broken | None:
    if row["id"] != expected:
        return Broken(expected, f"missing (row {row['id']} follows row {expected - 1})")
    if row["prev_hash"] != prev:
        if expected == 1:
            return Broken(1, "the first row chains to a row before it (rows before it were removed)")
        return Broken(expected, f"it does not chain to row {expected - 1}'s hash (that row was changed or replaced)")
    if digest(row) != row["hash"]:
        return Broken(expected, "its contents do not match its hash (the row was changed)")
    return None


def _row(row: Mapping[str, Any]) -> AuditRow:
    actor = Actor(row["actor_kind"], row["actor_user_id"], row["actor_team_id"])
    return AuditRow(int(row["id"]), float(row["at"]), actor, row["team_id"], row["action"], row["target"],
                    row["before"], row["after"], row["hash"], row["prev_hash"])  # fmt: skip


# --- reading --------------------------------------------------------------------------------------


def _listing(*where: Any) -> Sql:
    """Rows of one kind of sight, newest first, from `since` until before `until`, of one action or
    family (`action`, `family`: an action and `<family>.%`; '' and '%' for any)."""
    chosen = (audit.c.action == bindparam("action")) | audit.c.action.like(bindparam("family"))
    return Sql(
        select(audit).where(*where, audit.c.at >= bindparam("since"), audit.c.at < bindparam("until"), chosen)
        .order_by(audit.c.id.desc()).limit(bindparam("limit"))
    )  # fmt: skip


LISTS = {
    "all": _listing(),
    "team": _listing((audit.c.team_id == bindparam("team")) | (audit.c.actor_team_id == bindparam("team"))),
    "user": _listing(audit.c.actor_user_id == bindparam("user"), audit.c.actor_team_id.is_(None)),
}


def rows(tx: Tx, sight: AuditSight, since: float, until: float, action: str | None, limit: int) -> list[AuditRow]:
    params: dict[str, Any] = {"since": since, "until": until, "limit": limit,
                              "action": action or "", "family": f"{action}.%" if action else "%"}  # fmt: skip
    if sight.team_id is not None:
        params["team"] = sight.team_id
    elif sight.user_id is not None:
        params["user"] = sight.user_id
    return [_row(r._asdict()) for r in tx.all(LISTS[sight.shape], params)]


# --- what callers ask, and what they are shown ------------------------------------------------------

MAX_LIMIT = 1000
END_OF_TIME = 1e15  # (epoch seconds: later than any row, and a plain number to both databases)
DAY = re.compile(r"\d{4}-\d{2}-\d{2}")


def span(first: str | None, last: str | None) -> tuple[float, float]:
    """`from` and `to` as epoch seconds [since, until): a day (YYYY-MM-DD, UTC: `to`'s is included whole)
    or a moment (ISO 8601; UTC unless it says otherwise). UsageError naming the field."""
    since = _moment("from", first, 0.0) if first else 0.0
    until = _moment("to", last, 1.0) if last else END_OF_TIME
    if since >= until:
        raise UsageError(f"to: {last} is not after from: {first}")
    return since, until


def _moment(name: str, given: str, days_after: float) -> float:
    try:
        moment = datetime.fromisoformat(given)
    except ValueError:
        raise UsageError(f"{name}: expected a day (YYYY-MM-DD) or a moment (ISO 8601), got {given[:40]!r}") from None
    moment = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return moment.timestamp() + (days_after * 86_400 if DAY.fullmatch(given) else 0.0)


def check_action(action: str | None) -> str | None:
    if action is None or action in ACTIONS or action in FAMILIES:
        return action
    raise UsageError(f"action: unknown action {action[:60]!r} (expected one of {', '.join(FAMILIES + ACTIONS)})")


def check_limit(given: str | int) -> int:
    """A limit of rows, 1 to MAX_LIMIT, as a query or the command line gives it."""
    try:
        limit = int(given)
    except ValueError:
        limit = 0
    if not 1 <= limit <= MAX_LIMIT:
        raise UsageError(f"limit: expected a whole number from 1 to {MAX_LIMIT}, got {str(given)[:20]!r}")
    return limit


def shown(row: AuditRow) -> AuditRowOut:
    """A row as the API and `yao-agent audit --json` show it."""
    actor: AuditActorOut = {"user_id": row.actor.user_id, "team_id": row.actor.team_id, "kind": row.actor.kind}
    return {"id": row.id, "at": iso_time(row.at), "actor": actor, "action": row.action, "target": row.target,
            "before": row.before, "after": row.after, "hash": row.hash, "prev_hash": row.prev_hash}  # fmt: skip


class AuditStore:
    """The audit half of `SqlStore`: reading the log and checking its chain. (Rows are written by the
    store's other halves, in the transactions of the changes they record.)"""

    db: Database
    clock: Callable[[], float]

    async def audit_rows(
        self, sight: AuditSight, since: float, until: float, action: str | None = None, limit: int = 100
    ) -> list[AuditRow]:
        """The rows the sight admits, newest first: written from `since` until before `until` (epoch
        seconds), of `action` or the family it names (None: any), at most `limit`."""
        return await self.db.read_tx(lambda tx: rows(tx, sight, since, until, action, limit))

    async def audit_verify(self, operator: Operator) -> Verified:
        if not isinstance(operator, Operator):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise PermissionDenied("checking the audit log is an operator action")
        return await self.db.read_tx(verify)

    async def audit_reload(self, before: str, after: str, why: str) -> bool:
        """Record that the app serving changed from version `before` to `after`, unless the newest reload
        recorded already says so: the processes of one deployment each reload on the same change, and one
        row tells it. Whether a row was written."""
        now = self.clock()

        def work(tx: Tx) -> bool:
            _locked_head(tx)  # (first: two processes reloading at once each see the other's row, or none)
            known = last_after(tx, "app.reload")
            if isinstance(known, Mapping) and cast(Mapping[str, Any], known).get("version") == after:
                return False
            change = Change("app.reload", "app", before={"version": before}, after={"version": after, "why": why})
            append(tx, DEPLOYMENT, change, now)
            return True

        return await self.db.write_tx(work)
