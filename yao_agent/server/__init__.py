"""The HTTP server (`yao-agent serve`): native SSE API, OpenAI-compatible API, web chat page."""

from yao_agent.server.app import create_app

__all__ = ["create_app"]
