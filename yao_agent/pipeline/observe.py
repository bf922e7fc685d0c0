"""Who watches runs end: observers (metrics, traces) registered by the process, told of each root run
once it is stored, with everything it did — its record, its steps with their timing, connectors and
usage. One call per run, after the flush: a run that nobody watches pays a check of an empty list, and
a watcher that fails is logged and never fails the run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from yao_agent.pipeline.state import RunState

log = logging.getLogger("yao_agent.observe")
Observer = Callable[[RunState], None]
_observers: list[Observer] = []


def watch(observer: Observer) -> Callable[[], None]:
    """Tell `observer` of every run that ends in this process; returns what stops it."""
    _observers.append(observer)
    return lambda: _observers.remove(observer) if observer in _observers else None


def run_ended(state: RunState) -> None:
    for observer in list(_observers):
        try:
            observer(state)
        except Exception:
            log.exception("an observer of runs failed on run %s (the run is stored as it was)", state.run_id)
