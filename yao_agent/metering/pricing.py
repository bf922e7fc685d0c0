"""What a model call costs (CONTRACT §3.2 `pricing`, §8.2): the connector's own `pricing`, else the price
litellm's offline map publishes for its model, else unknown (its tokens are counted, its cost is not).

The map is the JSON file the litellm package ships. It is read as a file, never by importing litellm
(which costs a cold CLI more than a whole run), and only the one entry a connector needs is decoded
out of its 3 MB: a connector asks once per process, and pays a few milliseconds then.
"""

from __future__ import annotations

import importlib.util
import json
import logging
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from yao_agent.dsl.specs import ConnectorSpec, Pricing

log = logging.getLogger("yao_agent.metering.pricing")
MAP_FILE = "model_prices_and_context_window_backup.json"
PER_MTOK = 1_000_000


@dataclass(frozen=True, slots=True)
class Price:
    """USD per token, in and out."""

    input: float
    output: float

    def of(self, input_tokens: int, output_tokens: int) -> float:
        return input_tokens * self.input + output_tokens * self.output


def price_of(connector: ConnectorSpec) -> Price | None:
    """The connector's price per token; None when nobody says (a scripted or local connector costs nothing)."""
    if connector.pricing is not None:
        return _from_pricing(connector.pricing)
    if connector.scripted or connector.local:
        return Price(0.0, 0.0)
    return published(connector.type, connector.model)


def _from_pricing(pricing: Pricing) -> Price:
    return Price(pricing.input_per_mtok / PER_MTOK, pricing.output_per_mtok / PER_MTOK)


@cache
def published(provider: str, model: str) -> Price | None:
    """litellm's published price for a model (as `provider/model` or `model`), None if it has none."""
    text = _map_text()
    for key in (f"{provider}/{model}", model):
        entry = _entry(text, key) if text else None
        if entry is None:
            continue
        cost_in, cost_out = entry.get("input_cost_per_token"), entry.get("output_cost_per_token")
        if isinstance(cost_in, int | float) and isinstance(cost_out, int | float):
            return Price(float(cost_in), float(cost_out))
    return None


@cache
def _map_text() -> str:
    """The price map's text ('' when the litellm package, or its file, is not there)."""
    spec = importlib.util.find_spec("litellm")  # finds the package without running it
    if spec is None or not spec.submodule_search_locations:
        return ""
    path = Path(next(iter(spec.submodule_search_locations))) / MAP_FILE
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        log.warning("litellm's price map could not be read (%s): costs of unpriced connectors are unknown", exc)
        return ""


def _entry(text: str, key: str) -> dict[str, Any] | None:
    """One top-level entry of the map, decoded alone (the map's keys sit at the start of a line)."""
    at = text.find(f"\n    {json.dumps(key)}: {{")
    if at < 0:
        return None
    start = text.index("{", at)
    try:
        value, _ = json.JSONDecoder().raw_decode(text, start)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None  # pyright: ignore[reportUnknownVariableType]
