"""The search step (CONTRACT §9.1; seed 003 step ⑩, Yao's auto-search): after history and the Create hook,
before the first model call, the assistant's collections (and its web tool) are searched for the user's
last message, and what they give becomes numbered references the model is asked to cite.

Modes: `always` searches before each user turn; `auto` first asks `intent_with` whether the turn needs it;
`tool` gives the model a `search_knowledge` tool instead; `off`. A Create hook may switch it off or
rewrite the query. The step is stored (`search`, with the query, what was found and how long it took) and
a `references` event is sent; a search that fails is logged and stored as `recovered`, and the run goes
on without it: a search never fails a run.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from yao_agent.base.jsonvalue import as_list, as_mapping
from yao_agent.connectors import CallOptions, ModelRequest, resolve_connectors
from yao_agent.dsl.specs import McpUse, SearchSettings
from yao_agent.events import References
from yao_agent.knowledge.references import Reference, citations, prompt
from yao_agent.knowledge.search import Ask
from yao_agent.messages import Cited, text_of
from yao_agent.pipeline import aside, connector, journal
from yao_agent.pipeline.runtime import Runtime
from yao_agent.pipeline.state import RunState
from yao_agent.tools import ToolOutcome, ToolSpec
from yao_agent.tools.outcome import failure

log = logging.getLogger("yao_agent.knowledge")

TOOL = ToolSpec(
    name="search_knowledge", server="knowledge", tool="search_knowledge",
    description="Search the documents this assistant may consult. Returns numbered references; cite them as [n].",
    parameters={"type": "object", "required": ["query"], "additionalProperties": False,
                "properties": {"query": {"type": "string", "minLength": 1, "description": "what to look for"},
                               "top_k": {"type": "integer", "minimum": 1, "maximum": 20}}},
)  # fmt: skip
INTENT_PROMPT = (
    "Decide whether answering the user's message needs a search of the organisation's documents (policies, "
    "handbooks, product and internal knowledge). Small talk, arithmetic and requests about the conversation "
    "itself need none. Reply with one word: yes or no."
)


@dataclass(frozen=True, slots=True)
class Plan:
    query: str
    names: tuple[str, ...]
    top_k: int
    settings: SearchSettings


async def run(rt: Runtime, state: RunState) -> None:
    """The step, once per run (a resume keeps what its run found: pipeline/carry.py)."""
    if state.searched:
        return
    state.searched = True
    plan = _plan(state)
    if plan is None:
        return
    if plan.settings.mode == "auto" and not await _wanted(rt, state, plan):
        return
    found = await _search(rt, state, plan)
    if found:
        await _give(state, found)


def _plan(state: RunState) -> Plan | None:
    settings, choice = state.assistant.search, state.options.search
    if settings is None or settings.mode in ("off", "tool") or (choice is not None and choice.off):
        return None
    query = choice.query if choice is not None and choice.query else last_user_text(state.conversation)
    if not query.strip():
        return None
    names = choice.knowledge if choice is not None and choice.knowledge is not None else settings.knowledge
    top_k = choice.top_k if choice is not None and choice.top_k is not None else settings.top_k
    return Plan(query.strip()[:2000], names, top_k, settings)


def last_user_text(conversation: Sequence[Mapping[str, Any]]) -> str:
    return next((text_of(m.get("content")) for m in reversed(conversation) if m.get("role") == "user"), "")


async def _wanted(rt: Runtime, state: RunState, plan: Plan) -> bool:
    """`auto`: the intent check, a short call through `intent_with` (metered like every call). When it
    fails, the search runs: a needless search costs less than a missed one."""
    try:
        found = await resolve_connectors(plan.settings.intent_with, rt.app, state.identity,
                                         connector.settings(rt, state), rt.environ)  # fmt: skip
        request = ModelRequest(messages=[{"role": "system", "content": INTENT_PROMPT},
                                         {"role": "user", "content": plan.query}],
                               options=CallOptions(max_tokens=3, temperature=0))  # fmt: skip
        said, _ = await aside.call(rt, state, found.connectors, request, {"purpose": "search_intent"})
    except Exception as exc:
        log.warning("run %s: the search intent check failed (searching anyway): %s", state.run_id, exc)
        return True
    return not said.strip().lower().startswith("no")


async def _search(rt: Runtime, state: RunState, plan: Plan) -> list[Reference]:
    step = state.buffer.begin("search", None, state.thread_id)
    started = rt.monotonic()
    parts = await asyncio.gather(_knowledge(rt, state, plan), _web(rt, state, plan), return_exceptions=True)
    found: list[Reference] = []
    errors: list[str] = []
    for part in parts:
        if isinstance(part, BaseException):
            log.warning("run %s: a search failed (the run goes on without it): %s", state.run_id, part)
            errors.append(str(part) or type(part).__name__)
        else:
            found += part
    found.sort(key=lambda r: -r.score)
    found = found[: plan.top_k + (plan.top_k if plan.settings.web is not None else 0)]
    output: dict[str, Any] = {"query": plan.query, "knowledge": list(plan.names),
                              "found": [{"collection": r.collection, "document_id": r.document_id,
                                         "score": round(r.score, 4)} for r in found],
                              "ms": round((rt.monotonic() - started) * 1000, 1)}  # fmt: skip
    if errors:
        output["errors"] = errors
    state.buffer.end(step, "failed" if errors and not found else "completed", output=output,
                     error={"message": "; ".join(errors)} if errors and not found else None)  # fmt: skip
    if errors and not found:
        state.buffer.recovered(step)  # never where a resume starts: the run went on past it
    await journal.commit(rt, state, steps=[step])
    return found


async def _knowledge(rt: Runtime, state: RunState, plan: Plan) -> list[Reference]:
    if not plan.names:
        return []
    ask = Ask(plan.query, plan.top_k, plan.settings.min_score)
    return await rt.knowledge.search(state.identity, plan.names, ask)


async def _web(rt: Runtime, state: RunState, plan: Plan) -> list[Reference]:
    web = plan.settings.web
    if web is None:
        return []
    offer = await rt.tools.offer([McpUse(web.server, (web.tool,))])
    spec = rt.tools.find(f"{rt.app.mcps[web.server].tool_prefix}__{web.tool}", offer.tools)
    if spec is None:
        raise RuntimeError(offer.unavailable.get(web.server) or f"server '{web.server}' has no tool '{web.tool}'")
    outcome = await rt.tools.call(spec, json.dumps({"query": plan.query}))
    if outcome.error is not None:
        raise RuntimeError(outcome.error)
    return web_references(f"{web.server}.{web.tool}", outcome.result)[: plan.top_k]


def web_references(origin: str, result: Any) -> list[Reference]:
    """A web tool's answer as references: results of {title, url, text|snippet|content} — a list, one such
    object, {results: [...]}, or their JSON text (an MCP tool sends one text part per item) — else its text
    as one reference."""
    items = _items(result)
    if items is None:
        text = str(result or "").strip()
        return [Reference(origin, "", origin, text, 1.0, source="web")] if text else []
    out: list[Reference] = []
    for rank, item in enumerate(items):
        data = as_mapping(item)
        text = str(data.get("text") or data.get("snippet") or data.get("content") or "")
        url = str(data.get("url") or "")
        if text:
            out.append(Reference(origin, url, str(data.get("title") or url or origin), text, 1.0 / (1 + rank),
                                 source="web", url=url))  # fmt: skip
    return out


def _items(result: Any) -> list[Any] | None:
    values: list[Any] = _json_values(result) if isinstance(result, str) else [result]
    if not values:
        return None
    items: list[Any] = []
    for value in values:
        wrapped = as_mapping(value)
        if "results" in wrapped:
            items += as_list(wrapped["results"])
        elif wrapped:
            items.append(wrapped)
        elif isinstance(value, list):
            items += cast(list[Any], value)
        else:
            return None  # plain text, or a number: not results
    return items


def _json_values(text: str) -> list[Any]:
    """The JSON values `text` is made of, one after another; [] when it is not JSON."""
    decoder, values, at = json.JSONDecoder(), list[Any](), 0
    while at < len(text):
        while at < len(text) and text[at].isspace():
            at += 1
        if at == len(text):
            break
        try:
            value, at = decoder.raw_decode(text, at)
        except ValueError:
            return []
        values.append(value)
    return values


async def _give(state: RunState, found: Sequence[Reference]) -> None:
    """The references, numbered after any the run has already: in the event, and for the model."""
    start = len(state.references)
    given = [r.out(start + n) for n, r in enumerate(found, start=1)]
    state.references.extend(given)
    await state.emit(References(state.run_id, given))


def system_message(state: RunState) -> list[dict[str, Any]]:
    """What the model is told of the run's references (after the assistant's own prompts)."""
    if not state.references or state.assistant.search is None:
        return []
    return [{"role": "system", "content": prompt(state.references, cite=state.assistant.search.cite)}]


def offers_tool(state: RunState) -> bool:
    """Mode `tool`: the model is offered `search_knowledge` (unless Create switched search off)."""
    settings, choice = state.assistant.search, state.options.search
    return settings is not None and settings.mode == "tool" and not (choice is not None and choice.off)


async def tool_call(rt: Runtime, state: RunState, arguments: str) -> ToolOutcome:
    """`search_knowledge` called by the model: the references, numbered after the run's others, as text."""
    try:
        given = as_mapping(json.loads(arguments or "{}"))
    except ValueError:
        return failure('arguments are not JSON (expected {"query": "..."})', retryable=True)
    query, top_k = given.get("query"), given.get("top_k")
    if not isinstance(query, str) or not query.strip():
        return failure("query: expected the text to look for", retryable=True)
    settings = state.assistant.search or SearchSettings()
    if not isinstance(top_k, int) or isinstance(top_k, bool) or not 1 <= top_k <= 20:
        top_k = settings.top_k
    found = await _search(rt, state, Plan(query.strip()[:2000], settings.knowledge, top_k, settings))
    if not found:
        return ToolOutcome(result="No documents matched.", error=None, retryable=False)
    start = len(state.references)
    await _give(state, found)
    return ToolOutcome(result=prompt(state.references[start:], cite=settings.cite), error=None, retryable=False)


def cite(state: RunState, text: str) -> Cited | None:
    """The citation check of a reply: which references its `[n]` name, and which numbers name none."""
    if not state.references:
        return None
    known, unknown = citations(text, len(state.references))
    return Cited(tuple(state.references), known, unknown)


__all__ = ["TOOL", "cite", "offers_tool", "run", "system_message", "tool_call", "web_references"]
