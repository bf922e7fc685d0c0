"""Deterministic stand-in vectors, for offline tests only: they carry no meaning beyond shared words.

A text becomes a bag of its lower-cased words, each hashed (by a stable hash, not Python's salted one)
to one dimension and a sign, and the sum is L2-normalised. Texts that share words are near one another
and texts that share none are nearly orthogonal, which is enough for a test to tell a search that works
from one that does not; it is no model of language.
"""

from __future__ import annotations

import hashlib
import math
import re

_WORD = re.compile(r"\w+")


def hashed_vector(text: str, dims: int = 64) -> list[float]:
    """The text's vector of `dims` floats, of length 1 (all zeros for a text without words)."""
    if dims < 1:
        raise ValueError(f"dims must be at least 1, got {dims}")
    vector = [0.0] * dims
    for word in _WORD.findall(text.lower()):
        digest = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")
        vector[digest % dims] += 1.0 if digest >> 63 else -1.0
    norm = math.sqrt(sum(v * v for v in vector))
    return [v / norm for v in vector] if norm else vector


def word_count(text: str) -> int:
    """The words `hashed_vector` sees in `text`: what its users count as tokens."""
    return len(_WORD.findall(text))
