"""Durable state: chats, messages, runs, steps, role settings, memory, tokens."""

from yao_agent.identity import OPERATOR, Operator
from yao_agent.store.engine import HEAD, Database, open_engine, store_url
from yao_agent.store.protocol import Store
from yao_agent.store.sql import RoleSetting, SqlStore

__all__ = [
    "HEAD", "OPERATOR", "Database", "Operator", "RoleSetting", "SqlStore", "Store", "open_engine", "store_url",
]  # fmt: skip
