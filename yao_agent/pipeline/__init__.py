"""The Stream pipeline: one run, its stages in the contract's order, its events, its durable outcome."""

from yao_agent.pipeline.handle import RunHandle, RunResult
from yao_agent.pipeline.resume import start_resume
from yao_agent.pipeline.run import run_once, run_stream, start
from yao_agent.pipeline.runtime import Runtime
from yao_agent.pipeline.state import RunRequest

__all__ = ["RunHandle", "RunRequest", "RunResult", "Runtime", "run_once", "run_stream", "start", "start_resume"]
