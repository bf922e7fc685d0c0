"""Stages 6–9 of one run (or child run) as a machine: every step returns what happens next.

    Create hook → [ LLM → tools → Next hook | tool loop | standard ] → ... → Finish | Wait

`converse` drives it, and nothing else loops. Each model turn is asked for by a `Continue` that says
why (its transition, stored on the `llm` step: CONTRACT §4 "Transitions"); a `HandOver` gives the turn
to another assistant; `Finish` ends the run normally (once its final answer fits the run's output
schema, if it has one: pipeline/output.py); `Wait` stops it until a person decides on tool calls
(approvals.py). The outcomes are pipeline/outcomes.py's. Failures are `RunError`s, raised where they
happen. Every model call counts against `limits.max_turns`; repeated identical tool calls stop the
run (`loop_detected`). A message appended to the chat while the run works is answered before the
run finishes (transition `appended`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from yao_agent.base.jsonvalue import as_list, as_mapping
from yao_agent.errors import ModelError
from yao_agent.messages import ChatMessage
from yao_agent.pipeline import (
    approvals,
    client_tools,
    context,
    cut,
    delegate,
    guard,
    guards,
    hook_create,
    llm,
    next_hook,
    output,
    prompts,
    search,
    tool_round,
)
from yao_agent.pipeline.answers import NextDecision
from yao_agent.pipeline.options import RunOptions
from yao_agent.pipeline.outcomes import Continue, End, Finish, HandOver, Outcome, Wait
from yao_agent.pipeline.runtime import Runtime
from yao_agent.pipeline.state import RunState
from yao_agent.store.records import StepRecord
from yao_agent.store.step_inputs import Answered, HookCall, ToolRound
from yao_agent.vocabulary import Transition

LAST_WORD = (
    "You have used the tools as many times as this assistant allows. Do not call tools now: answer the "
    "user from the tool results gathered so far, and say what is still missing, if anything."
)
RETRY_PROMPT = (
    "One or more of your tool calls failed; the error is in each tool result above. Correct the call "
    "(its arguments must match the tool's JSON Schema) and call the tool again, or answer without it."
)


async def converse(rt: Runtime, state: RunState, resume_at: StepRecord | None = None) -> End:
    """The stages; a resumed run (or a child of one, at `resume_at`) starts at the step it stopped at.
    How it ended: done, or waiting for a person."""
    outcome = await _opening(rt, state, resume_at)
    while not isinstance(outcome := await _checked(state, outcome), Finish | Wait):
        if isinstance(outcome, HandOver):
            waits = await state.children.hand_over(state, outcome.target)
            outcome = waits if waits is not None else _unless_appended(state, Finish())
        else:
            outcome = await _turn(rt, state, outcome)
    return outcome


async def _checked(state: RunState, outcome: Outcome) -> Outcome:
    """Before the run finishes, its final answer is checked against its output schema (`output`): one
    that does not fit is sent back, without tools, since only the answer's form is at fault."""
    if not isinstance(outcome, Finish):
        return outcome
    correction = await output.check(state)
    return outcome if correction is None else Continue("output_retry", correction, with_tools=False)


async def _opening(rt: Runtime, state: RunState, resume_at: StepRecord | None) -> Outcome:
    """Where the run starts: the step a resumed run stopped at, or the Create hook (6)."""
    step = delegate.resume_target(state.request.resume) if state.parent is None else resume_at
    if step is not None and step.thread_id != state.thread_id:
        waits = await state.children.resume(state, step)  # it stopped inside a child: only that child resumes
        return waits if waits is not None else Finish()
    if step is not None and step.type == "hook_next" and isinstance(step.input, HookCall):
        return await _resume_next(rt, state, step.input)  # a Next hook failed after the model replied
    if step is not None and isinstance(step.input, ToolRound):
        return await _resume_round(rt, state, step.input)
    if step is not None and step.type == "llm" and step.status == "interrupted":
        after = await _after_journal(rt, state, step)  # a killed run: on after its last committed step
        if after is not None:
            return after
    if state.created or state.assistant.hook_path is None:  # Create decided already (pipeline/carry.py), or
        # there is none: the failed call is made again as it was asked for (a last word still without tools)
        if state.create_messages is not None:
            state.conversation = list(state.create_messages)
        await search.run(rt, state)  # the search step, unless the run it resumes made it (pipeline/carry.py)
        return cut.go_on(state, step, _again(step))  # a reply that broke off goes on where it stopped
    handed_to = await hook_create.run(rt, state)
    if handed_to is not None:
        return HandOver(handed_to)
    await search.run(rt, state)
    return Continue("first")


async def _after_journal(rt: Runtime, state: RunState, step: StepRecord) -> Outcome | None:
    """Where an interrupted run goes on (store/journal.py chose): its last reply was complete (nothing is
    asked again), or its last round of tool results goes on as the uninterrupted run would have (the
    loop detector, the Next hook and the tool loop see it); None: it starts over."""
    if isinstance(step.input, Answered):
        return Finish()
    if step.transition == "tool_results":
        found = await _last_round(rt, state)
        return await _after_reply(rt, state, *found) if found is not None else Continue("tool_results")
    return _again(step) if step.transition is not None else None


async def _last_round(rt: Runtime, state: RunState) -> tuple[ChatMessage, list[dict[str, Any]]] | None:
    """The stored reply whose round of tool results ended the journal, and those results as the Next hook
    is given them (a stored result is text: an error is in it, not beside it)."""
    reply = next((m for m in reversed(state.history) if m.role == "assistant" and m.tool_calls), None)
    if reply is None:
        return None  # beyond the history's window: the results go to the model as they are
    said = {m.tool_call_id: m.content for m in state.history if m.role == "tool"}
    tools = (await tool_round.offered(rt, state)).tools
    results: list[dict[str, Any]] = []
    for call in reply.tool_calls:
        spec = rt.tools.find(call.name, tools)
        server, tool = (spec.server, spec.tool) if spec is not None else ("", call.name)
        results.append({"tool_call_id": call.id, "server": server, "tool": tool, "arguments": call.arguments,
                        "result": said.get(call.id), "error": None})  # fmt: skip
    return reply, results


def _again(step: StepRecord | None) -> Continue:
    """The model call a resumed run makes again: the one that failed, for the reason it was made."""
    why: Transition = step.transition if step is not None and step.type == "llm" and step.transition else "first"
    if why == "tool_retry":
        return Continue(why, ({"role": "system", "content": RETRY_PROMPT},))
    if why == "last_word":
        return Continue(why, ({"role": "system", "content": LAST_WORD},), with_tools=False)
    return Continue(why)


async def _turn(rt: Runtime, state: RunState, how: Continue) -> Outcome:
    """One model turn (7) and what it leads to: its tool calls (8), then the Next hook or the tool loop (9)."""
    reply = await model_turn(rt, state, how)
    if how.transition == "last_word":
        return _unless_appended(state, Finish())  # calls it still asks for are answered "not run" at close
    if not reply.tool_calls:
        if state.tool_attempt and not _appended(state):
            state.tool_attempt = 0
            return Finish()  # asked to correct a tool call, the model answered instead: that answer stands
        state.tool_attempt = 0
        return await _after_reply(rt, state, reply, [])
    waiting = approvals.needing(state, reply.tool_calls, (await tool_round.offered(rt, state)).tools)
    if waiting:  # none of the reply's calls runs before a person decides
        return await approvals.wait(state, reply.tool_calls, waiting, state.tool_attempt + 1)
    ours, theirs = client_tools.split(state, reply.tool_calls)
    if theirs:  # the server's calls run first, then the client is given its own
        if ours:
            await tool_round.run_round(rt, state, replace(reply, tool_calls=tuple(ours)))
        return await client_tools.wait(state, theirs, state.tool_attempt + 1)
    executed = await tool_round.run_round(rt, state, reply)
    if isinstance(executed, tool_round.Correct):
        return Continue("tool_retry", ({"role": "system", "content": RETRY_PROMPT},))
    return await _after_reply(rt, state, reply, executed.results)


async def model_turn(rt: Runtime, state: RunState, how: Continue) -> ChatMessage:
    guards.before_model_call(state, rt.app.config.limits.max_turns)
    await guard.check_appended(rt, state)
    fold_appended(rt, state)
    offer = await tool_round.offered(rt, state)
    tools = [*(t.to_openai() for t in offer.tools), *client_tools.definitions(state)] if how.with_tools else []
    notes = tool_round.unavailable_note(offer)
    messages = [*prompts.system_messages(rt, state), *notes, *state.conversation, *how.extra]
    messages = await context.fit(rt, state, messages, tools)  # the context budget (5), before every call
    options = prompts.call_options(state).over(client_tools.call_option(state, tools))
    if how.continues is not None:  # as an output-limit continuation: a schema would start a new JSON value
        options = options.without("response_format")
    try:
        reply = await llm.call(rt, state, messages, tools, options=options, why=how.transition,
                               continues=how.continues)  # fmt: skip
    except ModelError as exc:  # the provider found it too long after all: compacted harder, tried once more
        if exc.kind != "context_overflow":
            raise
        messages = await context.refit(rt, state, messages, tools, exc)
        guards.before_model_call(state, rt.app.config.limits.max_turns)
        reply = await llm.call(rt, state, messages, tools, options=options, why="compact_retry",
                               continues=how.continues)  # fmt: skip
    state.conversation.append(reply.to_provider())
    return reply


def _appended(state: RunState) -> bool:
    return state.parent is None and bool(state.appended)


def _unless_appended(state: RunState, outcome: Outcome) -> Outcome:
    """A message appended to the chat while the model spoke gets its answer before the run ends."""
    return Continue("appended") if _appended(state) else outcome


def fold_appended(rt: Runtime, state: RunState) -> None:
    """Messages appended to the chat while this run was busy join its next model call, in order."""
    if state.parent is not None or not state.appended:
        return
    waiting, state.appended = state.appended, []
    for message in waiting:
        stored = ChatMessage(id=rt.ids.new("msg"), role="user", content=message["content"], run_id=state.run_id,
                             created_at=rt.clock())  # fmt: skip
        state.buffer.add(stored)
        state.conversation.append(stored.to_provider())


async def _after_reply(
    rt: Runtime, state: RunState, reply: ChatMessage, results: Sequence[Mapping[str, Any]],
    transition: Transition = "tool_results",
) -> Outcome:  # fmt: skip
    """What the reply leads to: a Next hook's decision; without one (or when it decides nothing), the
    tool loop."""
    guards.check_loop(state)
    decided = _decided(state, await next_hook.decide(rt, state, next_hook.arguments(state, reply, results)))
    return decided if decided is not None else _tool_loop(state, results, transition)


def _decided(state: RunState, decision: NextDecision | None) -> Outcome | None:
    """What a Next hook decided; None when it decided nothing (null, or only `data`): a hook that only
    observes never changes what the run does."""
    if decision is None:
        return None
    if decision.data is not None:
        state.next = decision.data
    if decision.stop:
        return _unless_appended(state, Finish())  # ended on purpose, also with tool results waiting
    if decision.delegate is not None:
        return HandOver(decision.delegate)
    if decision.continue_with is not None:
        state.conversation.extend(decision.continue_with)
        return Continue("hook_continue")
    return None


def _tool_loop(
    state: RunState, results: Sequence[Mapping[str, Any]], transition: Transition = "tool_results"
) -> Outcome:
    """Tool results go back to the model (at most `mcp.max_turns` times, then one last call without tools)."""
    if results and client_tools.brought(state, results):  # the client's results always go back to the model,
        return Continue(transition)  # and count as turns of the run, not of the server's tool loop
    if not results or not state.assistant.mcp.tool_loop:
        return _unless_appended(state, Finish())
    if state.tool_turns < state.assistant.mcp.max_turns:
        state.tool_turns += 1
        return Continue(transition)
    return Continue("last_word", ({"role": "system", "content": LAST_WORD},), with_tools=False)


async def _resume_next(rt: Runtime, state: RunState, given: HookCall) -> Outcome:
    """Only the Next hook runs again, with what it was given."""
    payload = as_mapping(given.args[0] if given.args else None)
    decided = _decided(state, await next_hook.decide(rt, state, list(given.args)))
    return decided if decided is not None else _tool_loop(state, as_list(payload.get("tools")))


async def _resume_round(rt: Runtime, state: RunState, given: ToolRound) -> Outcome:
    """The round's calls run again; each new result takes the place of the one stored for it when the run
    stopped."""
    calls = given.calls
    if given.require_approval and state.options.require_approval is None:
        # a Create hook's policy holds in the run's continuation too
        state.options = state.options.over(RunOptions(require_approval=given.require_approval))
    waiting = approvals.needing(state, calls, (await tool_round.offered(rt, state)).tools)
    if waiting:  # undecided (a continuation of a run whose flush was lost): they wait again
        return await approvals.wait(state, calls, waiting, given.attempt)
    decided = approvals.decisions(state)
    theirs = client_tools.unanswered(state, calls)  # the client's calls this request brings no result for
    calls = tuple(c for c in calls if c not in theirs)
    if not calls:
        return await client_tools.wait(state, theirs, given.attempt)
    ids = {c.id for c in calls}
    stored = {m.tool_call_id: m.id for m in state.root.history if m.role == "tool" and m.tool_call_id in ids}
    # What a continuation says after the client's results (client_tools.after_results) follows the results.
    held = len(state.written) if state.parent is None else 0
    words = state.conversation[len(state.conversation) - held :] if held else []
    state.conversation = [m for m in state.conversation[: len(state.conversation) - held]
                          if not (m["role"] == "tool" and m.get("tool_call_id") in ids)]  # fmt: skip
    reply = ChatMessage(rt.ids.new("msg"), "assistant", None, run_id=state.run_id, tool_calls=calls)
    executed = await tool_round.run_round(rt, state, reply, replacing=stored)
    state.conversation += words
    if theirs:
        return await client_tools.wait(state, theirs, given.attempt)
    if isinstance(executed, tool_round.Correct):
        return Continue("tool_retry", ({"role": "system", "content": RETRY_PROMPT},))
    after: Transition = "approved" if any(c.id in decided for c in calls) else "tool_results"
    return await _after_reply(rt, state, reply, executed.results, after)
