"""The one clock double: the time a runtime and its store see, as a test says."""

from __future__ import annotations

import time
from datetime import UTC, datetime

MOMENT = "2026-12-15T10:00:00"  # where a clock starts unless told: a weekday morning, mid-month


class Clock:
    """The time of the runtime and of the store alike (runs stamp their ledger rows, the store its rate events):
    a test sets it, and it stays where it was set; a `ticking` one goes on from there as time passes, so that
    a run's steps still take the time they take."""

    def __init__(self, at: str = MOMENT, *, ticking: bool = False) -> None:
        self.ticking = ticking
        self.now = 0.0
        self.since = time.monotonic()
        self.set(at)

    def __call__(self) -> float:
        return self.now + (time.monotonic() - self.since if self.ticking else 0.0)

    def set(self, at: str) -> None:
        """Move to the moment `at` (ISO 8601, UTC unless it says otherwise)."""
        moment = datetime.fromisoformat(at)
        self.now = (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()
        self.since = time.monotonic()

    def at(self, day: str, hour: int = 12) -> None:
        """Move to `hour` o'clock (UTC) of `day` (YYYY-MM-DD)."""
        self.set(f"{day}T{hour:02d}:00:00")

    def advance(self, seconds: float) -> None:
        self.now += seconds
