"""The `yao-agent` command: one module per command family, the parser assembled in `main.py`."""

from yao_agent.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
