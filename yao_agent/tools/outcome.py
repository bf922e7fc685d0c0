"""What one tool call produced, in the form the model is told about it.

Every outcome says whether the model may fix the call and try again (`retryable`): the pipeline feeds
those back to the model and ends the run on the others. A tool's output and errors are redacted of
every resolved secret before anything (the model, the stream, the store) sees them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from yao_agent.base.redact import redact

if TYPE_CHECKING:
    from mcp.types import CallToolResult, ContentBlock

DEFAULT_MAX_CHARS = 20_000
NO_OUTPUT = "(the tool returned no output)"


@dataclass(frozen=True)
class ToolOutcome:
    """`result` on success (text, or structured content when the tool gave no text); else `error`."""

    result: Any
    error: str | None
    retryable: bool

    @property
    def ok(self) -> bool:
        return self.error is None

    def text(self) -> str:
        """The content of the `tool` message sent back to the model."""
        if self.error is not None:
            # Servers often start their own messages with "Error"; saying it twice helps no model.
            return self.error if self.error.lower().startswith("error") else f"Error: {self.error}"
        if isinstance(self.result, str):
            return self.result or NO_OUTPUT  # some providers refuse an empty tool message
        return json.dumps(self.result, ensure_ascii=False)


def failure(message: str, *, retryable: bool) -> ToolOutcome:
    return ToolOutcome(result=None, error=redact(message), retryable=retryable)


def from_result(result: CallToolResult, max_chars: int = DEFAULT_MAX_CHARS) -> ToolOutcome:
    """A tool's answer as the model should see it.

    A tool-reported error (`is_error`) is retryable: it is the tool telling the model what was wrong.
    Text parts are joined; structured content stands in only when there is no text, since servers that
    send both put the same data in the text.
    """
    text = redact("\n".join(part for part in (_render(block) for block in result.content) if part))
    if result.is_error:
        return failure(truncate(text or "the tool reported an error without a message", max_chars), retryable=True)
    if text or result.structured_content is None:
        return ToolOutcome(result=truncate(text, max_chars), error=None, retryable=False)
    dumped = json.dumps(result.structured_content, ensure_ascii=False)
    cleaned = redact(dumped)
    if len(cleaned) > max_chars:
        return ToolOutcome(result=truncate(cleaned, max_chars), error=None, retryable=False)
    value = result.structured_content if cleaned == dumped else json.loads(cleaned)
    return ToolOutcome(result=value, error=None, retryable=False)


def truncate(text: str, max_chars: int) -> str:
    """Cut a result the model could not take whole, saying so, so it can ask for less."""
    if len(text) <= max_chars:
        return text
    return (
        text[:max_chars]
        + f"\n[truncated: the result has {len(text):,} characters; only the first {max_chars:,} are shown]"
    )


def _render(block: ContentBlock) -> str:
    """One content part as text; parts a text model cannot read are named, not dropped silently."""
    if block.type == "text":
        return block.text
    if block.type == "resource":
        inner = block.resource
        text: str | None = getattr(inner, "text", None)
        return text if text is not None else f"[binary resource {inner.uri} not shown]"
    if block.type == "resource_link":
        return f"[resource: {block.uri}]"
    return f"[{block.type} content ({block.mime_type}) not shown]"
