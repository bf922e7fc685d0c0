"""Evals: an app's cases (`evals/*.yml`) run as ordinary stored runs and checked (CONTRACT §9.4)."""

from yao_agent.evals.expect import Observed, Verdict, check
from yao_agent.evals.run import CaseResult, run_evals

__all__ = ["CaseResult", "Observed", "Verdict", "check", "run_evals"]
