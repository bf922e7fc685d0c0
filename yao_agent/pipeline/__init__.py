"""The Stream pipeline: one run, its stages in the contract's order, its events, its durable outcome.

Runs are started, resumed, cancelled and appended to through the `Runs` service (yao_agent/service/runs.py).
"""

from yao_agent.pipeline.handle import RunHandle, RunResult
from yao_agent.pipeline.runtime import Runtime
from yao_agent.pipeline.state import RunRequest

__all__ = ["RunHandle", "RunRequest", "RunResult", "Runtime"]
