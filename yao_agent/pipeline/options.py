"""What a run decided for itself (`RunOptions`): the request's call options, then a Create hook's choices.

Typed where they are given — a request's `options` (stage 1: an option a request may not set, or a
value with no JSON form, is refused there), a Create hook's answer, the carry of the run a resume
continues — and read by name past that. Their JSON form is what a hook is shown (`options`) and what
the carry stores (pipeline/carry.py): flat, names in the order they were set, the MCP servers as objects.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, cast

from yao_agent.base.jsonvalue import as_list, as_mapping
from yao_agent.connectors.request import NO_OPTIONS, RUN_CALL_OPTIONS, CallOptions
from yao_agent.dsl.specs import McpUse
from yao_agent.errors import UsageError


@dataclass(frozen=True, slots=True)
class SearchChoice:
    """A Create hook's `search` (CONTRACT §9.1): `false` switches the search step off for the run; an object
    rewrites its query, its collections or how many references it gives."""

    off: bool = False
    query: str | None = None
    knowledge: tuple[str, ...] | None = None
    top_k: int | None = None

    @classmethod
    def of(cls, given: Any) -> SearchChoice:
        """The JSON form read; a ValueError says what is wrong with it."""
        if given is False:
            return cls(off=True)
        data = as_mapping(given)
        if not isinstance(given, Mapping) or set(data) - {"query", "knowledge", "top_k"}:
            raise ValueError("search must be false or {query?, knowledge?, top_k?}")
        query, names, top_k = data.get("query"), data.get("knowledge"), data.get("top_k")
        if query is not None and (not isinstance(query, str) or not query.strip()):
            raise ValueError("search.query must be non-empty text")
        if names is not None and (
            not isinstance(names, list) or not all(isinstance(n, str) and n for n in cast(list[Any], names))
        ):
            raise ValueError("search.knowledge must be a list of collection ids")
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= 50):
            raise ValueError("search.top_k must be a whole number from 1 to 50")
        known = tuple(str(n) for n in cast(list[Any], names)) if names is not None else None
        return cls(query=query, knowledge=known, top_k=top_k)

    def to_json(self) -> Any:
        if self.off:
            return False
        given = {"query": self.query, "knowledge": list(self.knowledge) if self.knowledge is not None else None,
                 "top_k": self.top_k}  # fmt: skip
        return {k: v for k, v in given.items() if v is not None}


@dataclass(frozen=True, slots=True)
class RunOptions:
    """None (or the empty `call`): not set, the assistant's own holds."""

    connector: str | None = None  # a connector id or `use::<role>` (Create's: never resolved from $ENV)
    prompt_preset: str | None = None
    disable_global_prompts: bool | None = None
    mcp_servers: tuple[McpUse, ...] | None = None  # the servers whose tools are offered, instead of the assistant's
    require_approval: tuple[str, ...] | None = None  # tools whose calls wait for a person (approvals.py)
    search: SearchChoice | None = None  # what Create chose of the search step (pipeline/search.py)
    # The tools the client brought (OpenAI function tools, offered beside the assistant's: client_tools.py),
    # and its `tool_choice` for them; kept with the run, so a resume offers them again.
    client_tools: tuple[Mapping[str, Any], ...] | None = None
    tool_choice: str | Mapping[str, Any] | None = None
    call: CallOptions = NO_OPTIONS  # over the assistant's `options`, for each model call (RUN_CALL_OPTIONS)
    # The names set, in the order they were: the JSON form lists them so, as it did when this was a dict.
    # Options built by name list them all; built by field, they are found (own fields first).
    given: tuple[str, ...] = field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.given:
            own = (n for n in OWN if getattr(self, n) is not None)
            object.__setattr__(self, "given", (*own, *self.call.given))

    @classmethod
    def of_request(cls, given: Mapping[str, Any]) -> RunOptions:
        """A request's options: call options a run may set, of values JSON can carry (they reach a hook, the
        provider and the store); a UsageError names any other."""
        for name, value in given.items():
            if name not in RUN_CALL_OPTIONS:
                raise UsageError(f"options: '{name}' is not an option a request may set "
                                 f"(expected one of: {', '.join(RUN_CALL_OPTIONS)})")  # fmt: skip
            if not _plain(value):
                raise UsageError(f"options: '{name}' has no JSON form (a number, text, list or object, no NaN)")
        call = CallOptions.of(given)
        return cls(call=call, given=call.given)

    @classmethod
    def from_json(cls, stored: Mapping[str, Any]) -> RunOptions:
        """The JSON form read back (a carry); a name it does not know is passed over, as before."""
        own: dict[str, Any] = {n: stored[n] for n in OWN if stored.get(n) is not None}
        if "mcp_servers" in own:
            own["mcp_servers"] = tuple(_use(as_mapping(u)) for u in as_list(own["mcp_servers"]))
        if "client_tools" in own:
            own["client_tools"] = tuple(dict(as_mapping(t)) for t in as_list(own["client_tools"]))
        if "require_approval" in own:
            own["require_approval"] = tuple(str(n) for n in as_list(own["require_approval"]))
        if "search" in own:
            try:
                own["search"] = SearchChoice.of(own["search"])
            except ValueError:
                del own["search"]  # not a form this version wrote: the assistant's own search holds
        call = CallOptions.of({n: v for n, v in stored.items() if n in RUN_CALL_OPTIONS})
        order = tuple(n for n in stored if n in own or n in call.given)
        return cls(**own, call=call, given=order)

    def to_json(self) -> dict[str, Any]:
        """The JSON form: as a hook sees it and the carry stores it."""
        out: dict[str, Any] = {}
        for name in self.given:
            value = self._value(name)
            if name == "mcp_servers" and self.mcp_servers is not None:
                value = [_use_json(u) for u in self.mcp_servers]
            elif name == "search" and self.search is not None:
                value = self.search.to_json()
            elif isinstance(value, tuple):
                value = list(cast(tuple[Any, ...], value))
            out[name] = value
        return out

    def over(self, top: RunOptions) -> RunOptions:
        """These options with `top`'s set over them (a name already set keeps its place)."""
        if not top.given:
            return self
        own = {n: getattr(top, n) for n in top.given if n in _OWN}
        order = (*self.given, *(n for n in top.given if n not in self.given))
        return replace(self, **own, call=self.call.over(top.call), given=order)

    def _value(self, name: str) -> Any:
        return getattr(self, name) if name in _OWN else getattr(self.call, name)


OWN: tuple[str, ...] = tuple(f.name for f in fields(RunOptions) if f.name not in ("call", "given"))
_OWN = frozenset(OWN)


def _use_json(use: McpUse) -> dict[str, Any]:
    return {"server": use.server, "tools": list(use.tools) if use.tools is not None else None,
            "approve": list(use.approve)}  # fmt: skip


def _plain(value: Any) -> bool:
    """Whether a value can be sent, shown and stored as it is: the carry is written with the run's steps, and
    a value the store cannot write would cost the run its journal."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True


def _use(data: Mapping[str, Any]) -> McpUse:
    return McpUse(
        str(data.get("server")),
        tuple(str(t) for t in as_list(data["tools"])) if data.get("tools") is not None else None,
        tuple(str(a) for a in as_list(data.get("approve"))),
    )
