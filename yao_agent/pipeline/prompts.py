"""The request a model gets: system prompts (global, then the assistant's or a preset), then the chat."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from yao_agent.dsl.specs import PromptSpec
from yao_agent.dsl.templates import render
from yao_agent.errors import PromptError, RenderError
from yao_agent.pipeline import output
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
    disable = state.options.get("disable_global_prompts", spec.disable_global_prompts)
    preset = state.options.get("prompt_preset")
    own: tuple[PromptSpec, ...] = spec.prompt_presets.get(str(preset), spec.prompts) if preset else spec.prompts
    chosen = (() if disable else rt.app.config.prompts) + own
    if not chosen:
        return []
    values = variables(rt, state)
    out: list[dict[str, Any]] = []
    for prompt in chosen:
        message: dict[str, Any] = {"role": prompt.role, "content": _rendered(prompt, values)}
        if prompt.name:
            message["name"] = prompt.name
        out.append(message)
    return out


def _rendered(prompt: PromptSpec, values: dict[str, Any]) -> str:
    try:
        return render(prompt.content, values, prompt.origin)
    except RenderError as exc:  # the author's template: the run ends `prompt_error`, pointing at it
        file, _, line = prompt.origin.rpartition(":")
        if not line.isdigit():
            file, line = prompt.origin, ""
        raise PromptError(exc.message, file=file, line=int(line) if line else None) from None


# What a run's options (the request's, or the Create hook's) may set for each model call.
CALL_OPTIONS = (
    "temperature", "top_p", "max_tokens", "max_completion_tokens", "stop", "seed", "presence_penalty",
    "frequency_penalty", "logit_bias", "reasoning_effort", "parallel_tool_calls", "response_format",
)  # fmt: skip


def call_options(state: RunState) -> dict[str, Any]:
    """The assistant's options, overridden by what the Create hook set for this run; the output schema's
    `response_format` (pipeline/output.py) as the run's."""
    options = dict(state.assistant.options)
    options.update({k: state.options[k] for k in CALL_OPTIONS if k in state.options})
    answer_format = output.response_format(state)
    if answer_format is not None:
        options["response_format"] = answer_format
    return options
