"""The services the outside calls (the CLI, the server, the Python API): runs, chats, tenancy.

`Runs` (runs.py) is the door the Python API documents; `Chats`, `Tenancy` and `Process` are the parts
it shares one runtime with, which the server and the CLI also call directly. They load on first use:
a command that needs only `teams` or `probe` does not import the pipeline.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from yao_agent.service.chats import Chats
    from yao_agent.service.process import Process
    from yao_agent.service.runs import Runs
    from yao_agent.service.tenancy import Tenancy

_LAZY = {"Chats": "chats", "Process": "process", "Runs": "runs", "Tenancy": "tenancy"}


def __getattr__(name: str) -> object:
    if name not in _LAZY:
        raise AttributeError(f"module 'yao_agent.service' has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f".{_LAZY[name]}", __name__), name)


__all__ = ["Chats", "Process", "Runs", "Tenancy"]
