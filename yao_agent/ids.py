"""Ids for chats, runs, messages, steps and traces. Injected, so tests can make them predictable."""

from __future__ import annotations

import itertools
import secrets
import time
from typing import Protocol


class IdSource(Protocol):
    def new(self, prefix: str) -> str: ...


class RandomIds:
    """`<prefix>_<time-ordered, random>`: sortable by creation, unguessable, 26 characters after the prefix."""

    def new(self, prefix: str) -> str:
        return f"{prefix}_{time.time_ns() // 1_000_000:011x}{secrets.token_hex(8)}"


class CountingIds:
    """`<prefix>_1`, `<prefix>_2`, ... — for tests that assert on ids."""

    def __init__(self) -> None:
        self._counter = itertools.count(1)

    def new(self, prefix: str) -> str:
        return f"{prefix}_{next(self._counter)}"
