"""Fallback chains skip a connector that just failed, for its `cooldown_s`.

Without this, every turn of every chat would wait out a dead provider's retries (seconds each time)
before falling back. A connector that failed retryably (rate limit, server error, timeout, refused
connection) is skipped by chains until its cooldown is over; a chain whose every link is cooling
down tries them all anyway, in order, since a request must go somewhere. A success ends a cooldown.
The state is the process's own: each server process learns of a dead provider by itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from yao_agent.dsl.specs import ConnectorSpec


@dataclass
class Cooldowns:
    clock: Callable[[], float] = time.monotonic
    _until: dict[str, float] = field(default_factory=dict[str, float])

    def failed(self, connector: ConnectorSpec) -> None:
        if connector.cooldown_s > 0:
            self._until[connector.id] = self.clock() + connector.cooldown_s

    def succeeded(self, connector: ConnectorSpec) -> None:
        self._until.pop(connector.id, None)

    def remaining(self, connector: ConnectorSpec) -> float:
        """Seconds until the connector is tried again by chains (0: it is not cooling down)."""
        until = self._until.get(connector.id)
        return max(0.0, until - self.clock()) if until is not None else 0.0

    def usable(self, chain: Sequence[ConnectorSpec]) -> list[ConnectorSpec]:
        """The links of a chain to try, in order: those not cooling down, or all if every one is."""
        ready = [c for c in chain if self.remaining(c) == 0]
        return ready or list(chain)
