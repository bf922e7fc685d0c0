"""Stage 6, the Create hook: before the model, the assistant's JS may rewrite the request or hand it over.

It sees the conversation (history + clean input) and the run's options; it may return null, or
new `messages`, a `connector`, a `prompt_preset`, `temperature`/`max_tokens`, `metadata` to merge, a
`locale`, the `mcp_servers` to use, or a `delegate` that skips our model call. A value it may not
return (an unknown key, a wrong type, a prompt preset, connector or MCP server the app does not have)
is a hook error naming the hook file, so a typo never silently does nothing or fails as something else.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from yao_agent.base.jsonvalue import as_list, as_mapping
from yao_agent.connectors.request import RUN_CALL_OPTIONS, CallOptions
from yao_agent.dsl.refs import HANDFUL, known_list, unknown
from yao_agent.dsl.specs import ROLE_PREFIX, App, McpUse
from yao_agent.errors import HookError, UsageError
from yao_agent.messages import parse_input
from yao_agent.pipeline import carry, connector
from yao_agent.pipeline.answers import CreateChanges, Delegation
from yao_agent.pipeline.hooking import call_hook
from yao_agent.pipeline.options import OWN, RunOptions, SearchChoice
from yao_agent.pipeline.runtime import Runtime
from yao_agent.pipeline.state import RunState

ALLOWED = ("messages", "connector", "prompt_preset", "temperature", "max_tokens", "max_completion_tokens",
           "top_p", "metadata", "locale", "mcp_servers", "disable_global_prompts", "delegate",
           "require_approval", "search")  # fmt: skip
# The run's options Create sets as it gives them (the rest of ALLOWED changes the run in other ways, or
# is checked and typed first: `mcp_servers`, `require_approval`).
CHECKED = ("mcp_servers", "require_approval", "search")
OPTIONS = tuple(k for k in ALLOWED if k in (*OWN, *RUN_CALL_OPTIONS) and k not in CHECKED)


def run_options(state: RunState) -> dict[str, Any]:
    """The `options` a hook receives: what this run will use."""
    chosen = state.options.to_json()
    connector = chosen.pop("connector", state.assistant.connector)
    return {
        "connector": connector,
        "metadata": dict(state.metadata),  # a copy: the step records what the hook saw, not later merges
        "locale": state.locale,
        **chosen,
    }


async def run(rt: Runtime, state: RunState) -> Delegation | None:
    """Call Create (if the assistant has one) and apply what it returned; the hand-over it asked for, if any."""
    given = [list(state.conversation), run_options(state)]
    _, changes = await call_hook(rt, state, "hook_create", "Create", given, lambda v: _applied(rt.app, state, v))
    if changes is None:
        return None
    if changes.options.connector:
        await connector.resolve(rt, state)  # stage 4 again, for the connector the hook chose
    return changes.delegate


def _applied(app: App, state: RunState, value: Any) -> CreateChanges | None:
    """The changes Create asked for, applied to the run before its step is committed: that commit carries
    what the hook decided (pipeline/carry.py), so a resume holds to it without asking the hook again."""
    changes = check(app, state, value)
    if changes is not None:
        apply(state, changes)
    if state.parent is None and (changes is None or changes.delegate is None):
        state.created = True
        carry.keep_create_messages(state, changes.messages if changes is not None else None)
    return changes


def check(app: App, state: RunState, value: Any) -> CreateChanges | None:
    """The changes Create asked for, checked and typed; a HookError for anything it may not return."""
    if value is None:
        return None
    raw = dict(as_mapping(value))
    if not isinstance(value, Mapping):
        raise _bad(state, f"Create returned {type(value).__name__} (expected an object or null)")
    for key in raw:
        if key not in ALLOWED:
            raise _bad(state, f"Create returned unknown key '{key}' (expected one of: {', '.join(ALLOWED)})")
    preset = raw.get("prompt_preset")
    if preset is not None and preset not in state.assistant.prompt_presets:
        known = known_list(state.assistant.prompt_presets)
        raise _bad(state, f"Create chose unknown prompt preset '{preset}' (known: {known})")
    _check_types(state, raw)
    _check_connector(app, state, raw.get("connector"))
    return CreateChanges(
        messages=_messages(state, raw.get("messages")),
        metadata=as_mapping(raw.get("metadata")),
        locale=str(raw["locale"]) if raw.get("locale") else None,
        options=_options(app, state, raw),
        delegate=_delegation(raw.get("delegate")),
    )


def _options(app: App, state: RunState, raw: Mapping[str, Any]) -> RunOptions:
    """The run's options Create chose, in the order they are applied (the servers, then the approvals)."""
    given = {k: raw[k] for k in OPTIONS if raw.get(k) is not None}
    call = CallOptions.of({k: v for k, v in given.items() if k in RUN_CALL_OPTIONS})
    own: dict[str, Any] = {k: v for k, v in given.items() if k in OWN}
    if raw.get("mcp_servers") is not None:
        own["mcp_servers"] = _servers(app, state, raw["mcp_servers"])
    names = _names(state, raw.get("require_approval"))
    if names:
        own["require_approval"] = names
    if raw.get("search") is not None:
        try:
            own["search"] = SearchChoice.of(raw["search"])
        except ValueError as exc:
            raise _bad(state, f"Create returned {exc}") from None
    return RunOptions(**own, call=call, given=(*given, *(k for k in CHECKED if k in own)))


def _names(state: RunState, given: Any) -> tuple[str, ...]:
    """`require_approval`: tools (as the model calls them, or by their bare names), or `all`."""
    if given is None:
        return ()
    names = as_list(given)
    if not isinstance(given, list) or not all(isinstance(n, str) and n for n in names):
        raise _bad(state, "Create returned require_approval of the wrong shape (expected a list of tool names)")
    return tuple(str(n) for n in names)


def _messages(state: RunState, given: Any) -> list[dict[str, Any]] | None:
    if given is None:
        return None
    try:
        return parse_input(given, where="Create messages")
    except UsageError as exc:
        raise _bad(state, str(exc)) from None


def _delegation(given: Any) -> Delegation | None:
    """A `delegate` that passed `_check_types` (it names its assistant)."""
    if given is None:
        return None
    target = as_mapping(given)
    return Delegation(str(target["assistant_id"]), target.get("messages"))


def _check_connector(app: App, state: RunState, ref: str | None) -> None:
    """An explicit connector id must exist and admit the caller; a role (`use::…`) may be set per team or
    user at run time, so it is left to the connector stage. `$ENV` is never resolved in what a hook returns."""
    if ref and "$ENV" in ref:
        raise _bad(state, "Create returned a connector with $ENV in it ($ENV is only for the app's own YAML files)")
    if not ref or ref.startswith(ROLE_PREFIX):
        return
    # What a hook picks may come from the request, and its error reaches the tenant: only a connector the
    # caller may use (`access`) is known to them, and the error names only a few of those.
    usable = app.connectors_for(state.identity.user_id, state.identity.team_id)
    if ref not in usable:
        raise _bad(state, "Create chose " + unknown("connector", ref, usable, HANDFUL))


def _servers(app: App, state: RunState, entries: list[Any]) -> tuple[McpUse, ...]:
    """`mcp_servers` entries: a server id, or {server, tools?, approve?}; only servers the app declares."""
    out: list[McpUse] = []
    for entry in entries:
        data = as_mapping(entry)
        server = entry if isinstance(entry, str) else data.get("server", data.get("server_id"))
        tools = as_list(data.get("tools")) if data.get("tools") is not None else None
        approve = [data["approve"]] if isinstance(data.get("approve"), str) else as_list(data.get("approve"))
        if not isinstance(server, str) or not all(isinstance(t, str) for t in [*(tools or []), *approve]):
            raise _bad(state, "Create returned mcp_servers entries of the wrong shape "
                              "(expected id or {server, tools?, approve?})")  # fmt: skip
        if server not in app.mcps:
            raise _bad(state, "Create chose " + unknown("MCP server", server, app.mcps))
        out.append(McpUse(server, tuple(tools) if tools is not None else None, tuple(approve)))
    return tuple(out)


# The ranges the assistant's `options` allow (assistant.json): a value out of them fails the hook
# here, naming it, rather than the model call later, as a provider's error.
RANGES: dict[str, tuple[float, float]] = {"temperature": (0, 2), "top_p": (0, 1), "max_tokens": (1, math.inf),
                                          "max_completion_tokens": (1, math.inf)}  # fmt: skip


def _check_types(state: RunState, changes: Mapping[str, Any]) -> None:
    expected = {"connector": str, "prompt_preset": str, "locale": str, "temperature": (int, float),
                "top_p": (int, float), "max_tokens": int, "max_completion_tokens": int, "metadata": Mapping,
                "mcp_servers": list, "disable_global_prompts": bool, "delegate": Mapping}  # fmt: skip
    for key, kinds in expected.items():
        if key in changes and changes[key] is not None and not isinstance(changes[key], kinds):
            raise _bad(state, f"Create returned {key} of type {type(changes[key]).__name__}")
    for key, (low, high) in RANGES.items():
        value = changes.get(key)
        if value is not None and (isinstance(value, bool) or not low <= value <= high):
            said = f"at least {low}" if high == math.inf else f"from {low} to {high}"
            raise _bad(state, f"Create returned {key} {value!r} (expected a number {said})")
    delegate = changes.get("delegate")
    if delegate is not None and not isinstance(as_mapping(delegate).get("assistant_id"), str):
        raise _bad(state, "Create returned a delegate without assistant_id (expected {assistant_id, messages?})")


def apply(state: RunState, changes: CreateChanges) -> None:
    if changes.messages is not None:
        state.conversation = list(changes.messages)
    state.metadata.update(changes.metadata)
    if changes.locale:
        state.locale = changes.locale
    state.options = state.options.over(changes.options)
    if changes.options.mcp_servers is not None:
        state.tools = None  # list again, from the servers the hook chose


def _bad(state: RunState, message: str) -> HookError:
    return HookError(message, file=state.assistant.hook or "", function="Create")
