"""OpenAI's embeddings wire format, as the loopback fake provider answers `POST /v1/embeddings`.

Vectors are `hashed_vector`s (yao_agent.connectors.hashed): deterministic, so a test knows what any text
gets, and near for texts that share words. `dimensions` in the request sets their length (default 64);
`encoding_format: base64` gets them as little-endian float32, as OpenAI sends them to its own SDK. The
usage counts words as the prompt's tokens.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Sequence
from typing import Any, Final, cast

from yao_agent.connectors.hashed import hashed_vector, word_count
from yao_agent.testing.fake_scenarios import JsonObject

DEFAULT_DIMS: Final = 64
MAX_DIMS: Final = 4096


class BadEmbeddingsRequest(ValueError):
    """A body OpenAI would refuse with a 400: the message says what is wrong."""


def embeddings_request(body: object) -> tuple[list[str], int, str]:
    """The texts a body asks for (`input`: a string or a list of strings), the vectors' length, and the format."""
    if not isinstance(body, dict):
        raise BadEmbeddingsRequest("We could not parse the JSON body of your request.")
    obj = cast(JsonObject, body)
    given: Any = obj.get("input")
    texts = [given] if isinstance(given, str) else given
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in cast(list[Any], texts)):
        raise BadEmbeddingsRequest("'input' must be a string or a non-empty list of strings")
    dims = obj.get("dimensions", DEFAULT_DIMS)
    if not isinstance(dims, int) or isinstance(dims, bool) or not 1 <= dims <= MAX_DIMS:
        raise BadEmbeddingsRequest(f"'dimensions' must be an integer from 1 to {MAX_DIMS}")
    encoding = obj.get("encoding_format") or "float"
    if encoding not in ("float", "base64"):
        raise BadEmbeddingsRequest("'encoding_format' must be float or base64")
    return cast(list[str], texts), dims, str(encoding)


def embeddings_body(model: str, texts: Sequence[str], dims: int, encoding: str) -> JsonObject:
    """The answer: one `embedding` per text, in order, with the prompt's tokens."""
    data: list[JsonObject] = []
    for index, text in enumerate(texts):
        vector = hashed_vector(text, dims)
        shown: object = vector
        if encoding == "base64":
            shown = base64.b64encode(struct.pack(f"<{dims}f", *vector)).decode()
        data.append({"object": "embedding", "index": index, "embedding": shown})
    tokens = sum(word_count(text) for text in texts)
    return {"object": "list", "data": data, "model": model, "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}
