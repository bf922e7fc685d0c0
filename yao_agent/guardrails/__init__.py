"""Guardrails: checks on what goes into and out of a run (CONTRACT §9.5)."""
