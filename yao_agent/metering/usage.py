"""A run's usage (CONTRACT §5 `usage`, §8.2): tokens in and out, cost and model calls, its children's
included; and what one call adds to it, as its `llm` step records it (the usage ledger's row).

Cost is in USD from the answering connector's price (pricing.py). A call whose price is unknown — or
whose provider reported no usage — makes the run's `cost_usd` null: a sum that leaves some calls out
would look like the whole bill.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from yao_agent.connectors import Usage
from yao_agent.dsl.specs import ConnectorSpec
from yao_agent.metering.pricing import price_of

COST_DIGITS = 8  # a millionth of a cent: finer than any provider bills


def call_usage(usage: Usage | None, connector: ConnectorSpec | None) -> dict[str, Any] | None:
    """What one model call used, as its step records it: tokens, and their cost when it is known."""
    if usage is None:
        return None
    price = price_of(connector) if connector is not None else None
    cost = round(price.of(usage.prompt_tokens, usage.completion_tokens), COST_DIGITS) if price else None
    return {"input_tokens": usage.prompt_tokens, "output_tokens": usage.completion_tokens, "cost_usd": cost}


@dataclass
class RunUsage:
    """What a run used, summed over its model calls (a child run's count as its root's)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = 0.0
    calls: int = 0

    def add(self, used: dict[str, Any] | None) -> None:
        """One call, as `call_usage` recorded it (None: the provider said nothing of its tokens)."""
        self.calls += 1
        cost = used.get("cost_usd") if used is not None else None
        if used is not None:
            self.input_tokens += int(used["input_tokens"])
            self.output_tokens += int(used["output_tokens"])
        self.cost_usd = None if self.cost_usd is None or cost is None else self.cost_usd + float(cost)

    def as_dict(self) -> dict[str, Any]:
        cost = round(self.cost_usd, COST_DIGITS) if self.cost_usd is not None else None
        return {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                "total_tokens": self.input_tokens + self.output_tokens, "cost_usd": cost,
                "calls": self.calls}  # fmt: skip
