"""Pieces that know nothing of runs: asyncio helpers, safe file reads, JSON views, redaction, bounded
regexes and JSON Schema checks."""
