"""The store's tables (SQLAlchemy Core). Migrations in `migrations/versions` create exactly these.

Times are UTC epoch seconds (floats): the same on SQLite and PostgreSQL, cheap to compare.
`team_id` is '' for callers without a team, so scope filters are plain equalities.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    false,
    literal_column,
)

metadata = MetaData()

role_settings = Table(
    "role_settings",
    metadata,
    Column("scope_kind", String(8), primary_key=True),  # team | user
    Column("scope_id", String(128), primary_key=True),
    Column("role", String(128), primary_key=True),
    Column("connectors", JSON, nullable=False),  # an ordered list of connector ids
    Column("updated_at", Float, nullable=False),
)

chats = Table(
    "chats",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("user_id", String(128), nullable=False),
    Column("team_id", String(128), nullable=False, server_default=""),
    Column("assistant_id", String(256), nullable=False),
    Column("title", Text, nullable=False, server_default=""),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Column("last_status", String(16), nullable=False, server_default="running"),
    Column("last_run_id", String(64), nullable=True),
    Column("message_count", Integer, nullable=False, server_default="0"),
    Index("ix_chats_owner", "user_id", "team_id", "updated_at"),
)

messages = Table(
    "messages",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("chat_id", String(64), ForeignKey("chats.id", ondelete="CASCADE"), nullable=False),
    Column("seq", Integer, nullable=False),
    Column("run_id", String(64), nullable=True),
    Column("role", String(16), nullable=False),  # user | assistant | tool | system | summary
    Column("content", JSON, nullable=True),  # text, or a list of typed parts
    Column("tool_calls", JSON, nullable=True),
    Column("tool_call_id", String(128), nullable=True),
    Column("reasoning", Text, nullable=True),
    Column("status", String(16), nullable=False),  # completed | incomplete
    Column("thread_id", String(64), nullable=True),
    Column("created_at", Float, nullable=False),
    Column("hidden", Boolean, nullable=False, server_default=false()),  # never sent to a model again
    Column("summarises", JSON, nullable=True),  # a summary's [first, last] message ids
    Column("connector", String(256), nullable=True),  # an assistant message's: who answered (CONTRACT §6)
    Column("model", String(256), nullable=True),
    # An assistant message's extras: its references and what it cited (Cited), and `continues` (the id of the
    # cut reply a resume continued into it: store/runlog.py `_extras`).
    Column("citations", JSON, nullable=True),
    # An earlier version: the run (a regeneration or an edit) that replaced it. Kept and browsable, it is
    # no longer part of the chat: never sent to a model, not in the history a run or a reader loads.
    Column("replaced_by", String(64), nullable=True),
    Index("ux_messages_chat_seq", "chat_id", "seq", unique=True),
)
# A run loads its chat from the latest summary on: this finds it without reading the chat's other
# messages, and costs the other messages' inserts nothing. Migration 0005 makes it with the same
# condition on PostgreSQL; saying `postgresql_where` here too would import SQLAlchemy's PostgreSQL
# dialect in every process, on SQLite as well (spelled.py). The migrations make the tables, and Alembic's
# comparison with them (tests/store/test_schema.py) does not read an index's condition.
SUMMARY_ROLE = literal_column("'summary'", String)  # a literal, so both planners see the index's condition
Index("ix_messages_summaries", messages.c.chat_id, messages.c.seq, sqlite_where=messages.c.role == SUMMARY_ROLE)

runs = Table(
    "runs",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("chat_id", String(64), ForeignKey("chats.id", ondelete="CASCADE"), nullable=False),
    Column("user_id", String(128), nullable=False),
    Column("team_id", String(128), nullable=False, server_default=""),
    Column("assistant_id", String(256), nullable=False),
    Column("trace_id", String(64), nullable=False),
    Column("status", String(16), nullable=False),  # running | completed | failed | cancelled | interrupted
    Column("reason", String(32), nullable=True),
    Column("error", JSON, nullable=True),
    Column("usage", JSON, nullable=True),
    Column("next", JSON, nullable=True),
    Column("owner", String(128), nullable=False),  # host:pid:boot of the process running it
    Column("resumed_from", String(64), nullable=True),
    Column("started_at", Float, nullable=False),
    Column("heartbeat_at", Float, nullable=False),
    Column("ended_at", Float, nullable=True),
    Column("duration_ms", Integer, nullable=True),
    Column("app_version", String(32), nullable=True),  # the hash of the app's files it ran with
    Column("carry", JSON, nullable=True),  # what the run decided, for its resume (pipeline/carry.py)
    Index("ix_runs_chat", "chat_id", "started_at"),
    Index("ix_runs_status", "status"),
)

steps = Table(
    "steps",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("run_id", String(64), ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    Column("seq", Integer, nullable=False),
    Column("type", String(16), nullable=False),  # hook_create | llm | tool | hook_next | delegate
    Column("status", String(16), nullable=False),  # completed | failed | recovered | interrupted | cancelled
    Column("transition", String(32), nullable=True),  # why an llm step was made (first, tool_results, ...)
    Column("thread_id", String(64), nullable=True),
    Column("input", JSON, nullable=True),  # kept only for steps a resume may re-run
    Column("output", JSON, nullable=True),
    Column("error", JSON, nullable=True),
    Column("started_at", Float, nullable=False),
    Column("ended_at", Float, nullable=True),
    Index("ix_steps_run", "run_id", "seq"),
)

approvals = Table(  # tool calls that waited for a person, and the decisions (CONTRACT §4.8)
    "approvals",
    metadata,
    Column("run_id", String(64), ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    Column("tool_call_id", String(128), primary_key=True),
    Column("chat_id", String(64), ForeignKey("chats.id", ondelete="CASCADE"), nullable=False),
    Column("seq", Integer, nullable=False),  # the call's place in its reply
    Column("server", String(128), nullable=False),
    Column("tool", String(256), nullable=False),
    Column("arguments", JSON, nullable=True),
    Column("thread_id", String(64), nullable=True),
    Column("status", String(16), nullable=False),  # pending | approved | denied
    Column("reason", Text, nullable=True),
    Column("decided_by", String(128), nullable=True),
    Column("decided_at", Float, nullable=True),
    Column("message_id", String(64), nullable=True),  # the call's result message (its id survives a rerun)
    Column("created_at", Float, nullable=False),
    Index("ix_approvals_chat", "chat_id", "status"),
)

memory = Table(
    "memory",
    metadata,
    Column("chat_id", String(64), ForeignKey("chats.id", ondelete="CASCADE"), primary_key=True),
    Column("key", String(256), primary_key=True),
    Column("value", JSON, nullable=True),
    Column("updated_at", Float, nullable=False),
)

chat_leases = Table(
    "chat_leases",
    metadata,
    Column("chat_id", String(64), primary_key=True),
    Column("owner", String(128), nullable=False),  # the process holding the chat
    Column("run_id", String(64), nullable=False),
    Column("expires_at", Float, nullable=False),  # renewed by the holder's heartbeat
)

tokens = Table(
    "tokens",
    metadata,
    Column("hash", String(128), primary_key=True),  # sha256 of the token; the token itself is never stored
    Column("prefix", String(16), nullable=False),  # first characters, to tell tokens apart when listing
    Column("user_id", String(128), nullable=False),
    Column("team_id", String(128), nullable=False, server_default=""),
    Column("label", Text, nullable=False, server_default=""),
    Column("created_at", Float, nullable=False),
    Column("revoked_at", Float, nullable=True),
    Column("admin", Boolean, nullable=False, server_default=false()),  # a team admin's (CONTRACT §6 roles of tokens)
    # What a token is called in public (lists, DELETE /api/tokens/{id}): random, nothing of the secret.
    Column("id", String(40), nullable=False),
    Column("operator", Boolean, nullable=False, server_default=false()),  # acts on every team (CONTRACT §9.3)
    Column("expires_at", Float, nullable=True),  # none: it never expires
    Column("last_used_at", Float, nullable=True),  # written at most once a minute per token
    Index("ux_tokens_id", "id", unique=True),
)

# The web page's sign-ins through the identity provider (server/oidc_web.py): a hash of the session id the
# browser's cookie holds, who signed in, and the token the page sends with its writes (CSRF).
web_sessions = Table(
    "web_sessions",
    metadata,
    Column("hash", String(64), primary_key=True),
    Column("user_id", String(128), nullable=False),
    Column("team_id", String(128), nullable=False, server_default=""),
    Column("admin", Boolean, nullable=False, server_default=false()),
    Column("operator", Boolean, nullable=False, server_default=false()),
    Column("csrf", String(64), nullable=False),
    Column("created_at", Float, nullable=False),
    Column("expires_at", Float, nullable=False),
    Index("ix_web_sessions_expires", "expires_at"),
)

# The usage ledger: one row per model call (CONTRACT §8.2). Its rows outlive the chats they were spent in
# (`outlives_chats`: deleting a chat never gives its spend back to a budget), so it names them without
# foreign keys.
usage_ledger = Table(
    "usage_ledger",
    metadata,
    Column("step_id", String(64), primary_key=True),  # the call's `llm` step
    Column("run_id", String(64), nullable=False),  # the root run: a child's calls are its root's
    Column("chat_id", String(64), nullable=False),
    Column("user_id", String(128), nullable=False),
    Column("team_id", String(128), nullable=False, server_default=""),
    Column("assistant_id", String(256), nullable=False),  # the assistant whose call it was (a child's own)
    Column("connector", String(256), nullable=False),
    Column("model", String(256), nullable=False),
    Column("input_tokens", Integer, nullable=False),
    Column("output_tokens", Integer, nullable=False),
    Column("cost_usd", Float, nullable=True),  # null: the price is unknown
    Column("day", String(10), nullable=False),  # YYYY-MM-DD (UTC): what reports group and filter by
    Column("at", Float, nullable=False),
    Index("ix_usage_team", "team_id", "at"),
    Index("ix_usage_user", "user_id", "team_id", "at"),
    info={"outlives_chats": True},
)

spend_days = Table(  # what each scope spent per day (USD of known prices): what budgets read (ledger.py)
    "spend_days",
    metadata,
    Column("scope_kind", String(8), primary_key=True),  # team | user
    Column("scope_id", String(260), primary_key=True),  # as `ledger.scope_of` keys it
    Column("day", String(10), primary_key=True),  # YYYY-MM-DD (UTC)
    Column("cost_usd", Float, nullable=False),
    info={"outlives_chats": True},
)

budgets = Table(  # a team's or user's own spend limits (CONTRACT §8.2): the operator's ceilings, an admin's budget
    "budgets",
    metadata,
    Column("scope_kind", String(8), primary_key=True),  # team | user
    Column("scope_id", String(260), primary_key=True),  # a team id, or team/user (the user alone without a team)
    # A team admin's budget, at or below the ceiling: {"per_day"?: USD | null, "per_month"?: USD | null}.
    Column("limits", JSON, nullable=False),
    # The operator's ceilings, over app.yml's defaults: the same shape (null: no ceiling in that window).
    Column("ceilings", JSON, nullable=True),
    Column("updated_at", Float, nullable=False),
)

# What model calls in flight may still cost, reserved per scope until each ends (CONTRACT §8.2): a call
# is not made while spend plus these reach a budget. A row outlives a process that dies mid-call only
# until `expires_at` (its run's `limits.timeout_s`), so a crash never holds a budget for good.
budget_holds = Table(
    "budget_holds",
    metadata,
    Column("scope_kind", String(8), primary_key=True),
    Column("scope_id", String(260), primary_key=True),
    Column("id", String(64), primary_key=True),  # the call's `llm` step
    Column("run_id", String(64), nullable=False),
    Column("cost_usd", Float, nullable=False),
    Column("expires_at", Float, nullable=False),
    info={"outlives_chats": True},  # a call in flight keeps its hold if its chat is deleted meanwhile
)

rate_events = Table(  # runs admitted per scope, for `limits.requests_per_minute` across processes
    "rate_events",
    metadata,
    Column("scope_kind", String(8), primary_key=True),
    Column("scope_id", String(260), primary_key=True),
    Column("run_id", String(64), primary_key=True),
    Column("at", Float, nullable=False),
    Index("ix_rate_events_scope", "scope_kind", "scope_id", "at"),
)


# The knowledge base (CONTRACT §9.1). A collection is an app's (declared in knowledge/*.yml, team_id '')
# or a team's (`<team>:<name>`). Full text is indexed beside these tables, outside schema.py, because
# each database spells it its own way (migration 0012): on SQLite the FTS5 table `kb_fts` over
# kb_chunks, kept by triggers; on PostgreSQL a generated `fts` tsvector column of kb_chunks, GIN-indexed.
kb_collections = Table(
    "kb_collections",
    metadata,
    Column("id", String(300), primary_key=True),
    Column("team_id", String(128), nullable=False, server_default=""),
    Column("origin", String(8), nullable=False),  # app | team
    Column("name", Text, nullable=False),
    Column("embedding", String(300), nullable=False, server_default=""),  # '': full text only
    Column("generation", Integer, nullable=False, server_default="0"),  # bumped by every change: caches key on it
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
)

kb_documents = Table(
    "kb_documents",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("collection_id", String(300), ForeignKey("kb_collections.id", ondelete="CASCADE"), nullable=False),
    Column("title", Text, nullable=False),
    Column("source", Text, nullable=False, server_default=""),  # '': an upload; else a synced file's relative path
    Column("content_hash", String(64), nullable=False),
    Column("meta", JSON, nullable=False),  # string → string: what searches filter on
    Column("chunk_count", Integer, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Index("ix_kb_documents_source", "collection_id", "source"),
    Index("ix_kb_documents_hash", "collection_id", "content_hash"),
)

kb_chunks = Table(
    "kb_chunks",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),  # the full-text index's row id
    Column("document_id", String(64), ForeignKey("kb_documents.id", ondelete="CASCADE"), nullable=False),
    Column("collection_id", String(300), nullable=False),
    Column("seq", Integer, nullable=False),
    Column("heading", Text, nullable=False, server_default=""),
    Column("text", Text, nullable=False),
    Column("digest", String(64), nullable=False),  # of its text: an edited document re-embeds only what changed
    Column("vector", LargeBinary, nullable=True),  # float32 little-endian, normalised; null: not embedded (yet)
    Index("ix_kb_chunks_collection", "collection_id"),
    Index("ix_kb_chunks_document", "document_id"),
    Index("ix_kb_chunks_digest", "collection_id", "digest"),
)


# The audit log (CONTRACT §9.3): one row per change of tokens, role mappings, budgets, knowledge, approval
# decisions and app reloads, written in the transaction of the change (audit.py). Rows are numbered 1, 2, …
# with no gap, and each one's `hash` covers its fields and the hash before it, so an edited, removed or
# reordered row breaks the chain where it is. It outlives the chats its rows name.
audit = Table(
    "audit",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),  # the row's place in the chain, from 1
    Column("at", Float, nullable=False),
    Column("actor_user_id", String(128), nullable=True),  # None: the deployment itself, or the CLI
    Column("actor_team_id", String(128), nullable=True),
    Column("actor_kind", String(16), nullable=False),  # member | admin | operator | cli | oidc
    Column("team_id", String(128), nullable=False, server_default=""),  # the team the change concerns ('' none)
    Column("action", String(64), nullable=False),  # e.g. token.create, role.set, kb.document.delete
    Column("target", Text, nullable=False),  # what changed, e.g. role/team/acme/support
    Column("before", JSON, nullable=True),
    Column("after", JSON, nullable=True),
    Column("hash", String(64), nullable=False),
    Column("prev_hash", String(64), nullable=False),  # '' for the first row
    Index("ix_audit_at", "at"),
    Index("ix_audit_team", "team_id", "at"),
    Index("ix_audit_actor_team", "actor_team_id", "at"),
    info={"outlives_chats": True},
)

# The chain's head: the last row's number and hash, in one row (id 1). Appending locks it (on PostgreSQL;
# SQLite's write lock serialises writers already), so two writers never chain onto the same row; and it
# names the last row, so removing rows from the end is caught too.
audit_head = Table(
    "audit_head",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("seq", Integer, nullable=False),
    Column("hash", String(64), nullable=False),
    info={"outlives_chats": True},
)

# What each MCP server offered when it was last listed (tools/manager.py): its tools' names, descriptions and
# argument schemas. A replay (evals/replay.py) offers a model these without starting the server.
tool_catalogs = Table(
    "tool_catalogs",
    metadata,
    Column("server_id", String(128), primary_key=True),
    Column("tools", JSON, nullable=False),  # [{tool, description, parameters}], in the server's order
    Column("listed_at", Float, nullable=False),
    info={"outlives_chats": True},
)
