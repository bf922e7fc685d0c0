"""The request a model gets: system prompts (global, then the assistant's or a preset), then the chat."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from yao_agent.connectors import CallOptions
from yao_agent.dsl.specs import PromptSpec
from yao_agent.dsl.templates import render
from yao_agent.errors import PromptError, RenderError
from yao_agent.pipeline import output, search
from yao_agent.pipeline.runtime import Runtime
from yao_agent.pipeline.state import RunState


def variables(rt: Runtime, state: RunState) -> dict[str, Any]:
    spec = state.assistant
    return {
        "assistant": {"id": spec.id, "name": spec.name, "description": spec.description},
        "user_id": state.identity.user_id,
        "team_id": state.identity.team_id,
        "chat_id": state.chat_id,
        "locale": state.locale,
        "now": datetime.fromtimestamp(rt.clock(), UTC),
        "metadata": state.metadata,
    }


def system_messages(rt: Runtime, state: RunState) -> list[dict[str, Any]]:
    spec = state.assistant
    chosen_disable = state.options.disable_global_prompts
    disable = chosen_disable if chosen_disable is not None else spec.disable_global_prompts
    preset = state.options.prompt_preset
    own: tuple[PromptSpec, ...] = spec.prompt_presets.get(str(preset), spec.prompts) if preset else spec.prompts
    chosen = (() if disable else rt.app.config.prompts) + own
    if not chosen:
        return search.system_message(state)
    values = variables(rt, state)
    out: list[dict[str, Any]] = []
    for prompt in chosen:
        message: dict[str, Any] = {"role": prompt.role, "content": _rendered(prompt, values)}
        if prompt.name:
            message["name"] = prompt.name
        out.append(message)
    return [*out, *search.system_message(state)]  # the references come after the assistant's own prompts


def _rendered(prompt: PromptSpec, values: dict[str, Any]) -> str:
    try:
        return render(prompt.content, values, prompt.origin)
    except RenderError as exc:  # the author's template: the run ends `prompt_error`, pointing at it
        file, _, line = prompt.origin.rpartition(":")
        if not line.isdigit():
            file, line = prompt.origin, ""
        raise PromptError(exc.message, file=file, line=int(line) if line else None) from None


def call_options(state: RunState) -> CallOptions:
    """The assistant's options, overridden by what the request and the Create hook set for this run; the
    output schema's `response_format` (pipeline/output.py) as the run's."""
    options = CallOptions.of(state.assistant.options).over(state.options.call)
    answer_format = output.response_format(state)
    if answer_format is not None:
        options = options.over(CallOptions(response_format=answer_format))
    return options
