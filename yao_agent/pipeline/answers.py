"""What a hook answered, parsed once at the hook boundary into typed values.

`hook_create.check` turns Create's return value into `CreateChanges` and `next_hook.check` turns
Next's into a `NextDecision`; past that point no stage reads a hook's answer by key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from yao_agent.pipeline.options import RunOptions


@dataclass(frozen=True, slots=True)
class Delegation:
    """A hand-over to another assistant: its id, and the messages it gets (None: the conversation so far).
    The messages are checked when the child starts (a wrong shape is a `delegate_error`)."""

    assistant_id: str
    messages: Any = None


@dataclass(frozen=True, slots=True)
class CreateChanges:
    """What a Create hook changes for this run."""

    messages: list[dict[str, Any]] | None = None  # replace history + input for the model
    metadata: Mapping[str, Any] = field(default_factory=dict[str, Any])  # merged into the run's
    locale: str | None = None
    # connector, prompt_preset, temperature, ..., mcp_servers, require_approval (pipeline/options.py)
    options: RunOptions = field(default_factory=RunOptions)
    delegate: Delegation | None = None


@dataclass(frozen=True, slots=True)
class NextDecision:
    """What a Next hook decided. At most one of `stop`, `delegate`, `continue_with`; none of them (null,
    or only `data`) leaves the decision to the tool loop, as if there were no hook."""

    data: Any = None
    stop: bool = False
    delegate: Delegation | None = None
    continue_with: tuple[dict[str, Any], ...] | None = None  # messages appended before one more model turn
