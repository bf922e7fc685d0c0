"""A connector's `capabilities`, enforced: what it is sent, and which requests it cannot take at all.

- `vision: false` — a request with image parts cannot go to it: a fallback chain skips it; a chain
  with no link that can read images fails the call with a message naming the connector.
- `tool_calls: false` — no tools are offered (and no tool choice sent).
- `reasoning: false` — `reasoning_effort` is not sent (providers refuse it for other models).
- `structured_output` — an output schema (`response_format`) goes as the provider's parameter, or,
  for a connector without it, as a system instruction the model can follow.
- `max_output_tokens` — a larger `max_tokens` (or `max_completion_tokens`) is lowered to it.
- `type: local` connectors only embed: a chain skips them, as a request they cannot take.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from yao_agent.base.jsonvalue import as_list, as_mapping
from yao_agent.connectors.request import Message, ModelRequest
from yao_agent.dsl.specs import ConnectorSpec

IMAGE_PARTS = frozenset({"image_url", "input_image", "image"})
LIMITED = ("max_tokens", "max_completion_tokens")


def has_images(messages: Sequence[Message]) -> bool:
    return any(as_mapping(part).get("type") in IMAGE_PARTS for m in messages for part in as_list(m.get("content")))


def refusal(connector: ConnectorSpec, request: ModelRequest) -> str | None:
    """Why `connector` cannot take `request` at all, or None."""
    if connector.local:
        return cannot_chat(connector)
    if not connector.capabilities.vision and has_images(request.messages):
        return cannot_read_images(connector)
    return None


def cannot_read_images(connector: ConnectorSpec) -> str:
    return f"connector {connector.id} cannot read images (its capabilities.vision is false)"


def cannot_chat(connector: ConnectorSpec) -> str:
    return f"connector {connector.id} only serves embeddings (type: local), it cannot answer a chat"


def adapt(connector: ConnectorSpec, params: dict[str, Any]) -> dict[str, Any]:
    """Chat-completions parameters made fit for what the connector can do (changed in place)."""
    caps = connector.capabilities
    if not caps.tool_calls or not params.get("tools"):
        for key in ("tools", "tool_choice", "parallel_tool_calls"):
            params.pop(key, None)
    if not caps.reasoning:
        params.pop("reasoning_effort", None)
    if caps.max_output_tokens is not None:
        for key in LIMITED:
            if isinstance(params.get(key), int) and params[key] > caps.max_output_tokens:
                params[key] = caps.max_output_tokens
    if not caps.structured_output and params.get("response_format") is not None:
        instruction = output_instruction(as_mapping(params.pop("response_format")))
        params["messages"] = [*params["messages"], {"role": "system", "content": instruction}]
    return params


def output_instruction(response_format: Mapping[str, Any]) -> str:
    """The output format, said in words, for a model that takes no `response_format` parameter."""
    schema = as_mapping(response_format.get("json_schema")).get("schema")
    if response_format.get("type") == "json_schema" and schema is not None:
        shown = json.dumps(schema, ensure_ascii=False, separators=(",", ":"))
        return "Answer with one JSON value only, no other text, valid against this JSON Schema: " + shown
    if response_format.get("type") == "json_object":
        return "Answer with one JSON object only, no other text."
    return "Answer in plain text."
