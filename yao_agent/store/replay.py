"""What a replay reads of the store (evals/replay.py): stored turns, chosen across tenants by the operator,
and what each MCP server offered when it was last listed, so a model can be offered its tools again
without starting it."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.sql import ClauseElement

from yao_agent.base.jsonvalue import as_list, as_mapping
from yao_agent.errors import PermissionDenied
from yao_agent.identity import Operator
from yao_agent.messages import ChatMessage
from yao_agent.store import runlog
from yao_agent.store.chats import run_record
from yao_agent.store.engine import Database
from yao_agent.store.records import RunRecord
from yao_agent.store.schema import runs, tool_catalogs
from yao_agent.store.spelled import Spelled, conflict_insert
from yao_agent.store.tx import Sql, Tx

SELECT_CATALOGS = Sql(select(tool_catalogs.c.server_id, tool_catalogs.c.tools))
RUN_STARTS = Sql(select(runs.c.id, runs.c.started_at).where(runs.c.chat_id == bindparam("chat_id")))


def _upsert_catalog(dialect: str) -> ClauseElement:
    insert = conflict_insert(dialect, tool_catalogs)
    return insert.on_conflict_do_update(
        index_elements=["server_id"], set_={"tools": insert.excluded.tools, "listed_at": insert.excluded.listed_at}
    )


SAVE_CATALOG = Sql(Spelled(_upsert_catalog), columns=[c.key for c in tool_catalogs.c])


@dataclass(frozen=True, slots=True)
class StoredTurn:
    """One completed run and its chat as it stood: what came before it, and what the run added (the user's
    message first, then the replies, tool calls and their results)."""

    run: RunRecord
    before: Sequence[ChatMessage]
    turn: Sequence[ChatMessage]


class ReplayStore:
    """The replay half of `SqlStore`."""

    db: Database
    clock: Callable[[], float]

    async def save_tool_catalog(self, server_id: str, tools: Sequence[Mapping[str, Any]]) -> None:
        """Keep what `server_id` offers (the last listing wins)."""
        values = {"server_id": server_id, "tools": [dict(t) for t in tools], "listed_at": self.clock()}
        await self.db.write_tx(lambda tx: tx.execute(SAVE_CATALOG, values))

    async def tool_catalogs(self) -> dict[str, list[dict[str, Any]]]:
        """Every server's last listing, by server id."""
        rows = await self.db.read_tx(lambda tx: tx.tuples(SELECT_CATALOGS))
        return {str(server): [dict(as_mapping(t)) for t in as_list(tools)] for server, tools in rows}

    async def stored_turns(
        self, operator: Operator, *, assistant: str | None = None, team: str | None = None,
        since: float | None = None, limit: int = 50,
    ) -> list[StoredTurn]:  # fmt: skip
        """The latest completed turns (newest first), of every tenant unless `team` narrows them: the
        operator's view. A turn a resume finished is left out: its user's message is another run's."""
        if not isinstance(operator, Operator):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise PermissionDenied("replaying stored runs is the operator's")
        query = select(runs).where(runs.c.status == "completed", runs.c.resumed_from.is_(None))
        if assistant is not None:
            query = query.where(runs.c.assistant_id == assistant)
        if team is not None:
            query = query.where(runs.c.team_id == team)
        if since is not None:
            query = query.where(runs.c.started_at >= since)
        query = query.order_by(runs.c.started_at.desc(), runs.c.id.desc()).limit(limit)
        return await self.db.read_tx(lambda tx: [_turn(tx, run_record(row)) for row in tx.all(query)])


def _turn(tx: Tx, run: RunRecord) -> StoredTurn:
    """The run's turn and its chat as it stood when the run started: a message a later regeneration or edit
    replaced was still there then (and the run's own messages are its turn, replaced or not); one replaced by
    this run or an earlier one was not."""
    chat = runlog.messages_of(tx, run.chat_id, None, versions=True)
    started: dict[str, float] = dict(tx.tuples(RUN_STARTS, {"chat_id": run.chat_id}))
    first = next((i for i, m in enumerate(chat) if m.run_id == run.id), len(chat))
    before = [m for m in chat[:first] if m.replaced_by is None or started.get(m.replaced_by, 0.0) > run.started_at]
    return StoredTurn(run, before, [m for m in chat[first:] if m.run_id == run.id])
