"""MCP tools for assistants: the catalogue the model is offered, argument checks, and calls.

Importing this package does not import the MCP SDK; the first server used does.
"""

from yao_agent.tools.catalog import ToolSpec
from yao_agent.tools.manager import Offer, ToolManager, Tools
from yao_agent.tools.outcome import ToolOutcome

__all__ = ["Offer", "ToolManager", "ToolOutcome", "ToolSpec", "Tools"]
