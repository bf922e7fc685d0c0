"""What processes sharing a PostgreSQL database tell each other (LISTEN/NOTIFY on one channel), and the
release of a chat's lease, which is also such a notice: written by the lease (leases.py) and by the run's
flush, whose transaction lets the chat go (chats.py `finish_run`)."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import bindparam, delete, func, select

from yao_agent.store.records import LeaseRelease
from yao_agent.store.schema import chat_leases
from yao_agent.store.tx import Sql, Tx

CHANNEL = "yao_agent_chats"
NOTIFY = Sql(select(func.pg_notify(bindparam("channel"), bindparam("payload"))))
RELEASE = Sql(delete(chat_leases).where(chat_leases.c.chat_id == bindparam("chat_id"),
                                        chat_leases.c.run_id == bindparam("run_id")))  # fmt: skip


def notify(tx: Tx, message: dict[str, Any]) -> None:
    """Tell every listening process (delivered when the transaction commits)."""
    tx.execute(NOTIFY, {"channel": CHANNEL, "payload": json.dumps(message)})


def let_go(tx: Tx, release: LeaseRelease) -> None:
    """The run's lease of its chat let go (if still its own), and the processes waiting for the chat told."""
    tx.execute(RELEASE, {"chat_id": release.chat_id, "run_id": release.run_id})
    notify(tx, {"op": "release", "chat_id": release.chat_id})
