"""The `local` engine: `type: local` connectors embed inside this process, with no provider and no network.

Its one model, `wordllama-256`, is the 256-dimension WordLlama table that the `wordllama` package ships
in its wheel (a token's vector is a row; a text's is the mean of its tokens' rows, L2-normalised, as
WordLlama's own inference computes it). The files are read from the installed package and nothing else:
WordLlama's loader looks for its tokenizer in a folder the wheel does not have and would then try to
download it, so the table and the tokenizer are opened here directly. The package itself is never
imported: importing it configures the root logger (`logging.basicConfig`) and pulls in HTTP libraries.

The table loads once per process, on first use, on a thread (0.1–0.2 s measured, 0.3 s with numpy's
import); every embedding runs on a thread too, so the event loop never waits on it (about 7,000 texts
of 60 words a second). A local connector cannot chat: `stream` refuses.
"""

from __future__ import annotations

import asyncio
import importlib.util
import threading
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
from safetensors.numpy import load_file  # pyright: ignore[reportUnknownVariableType] (its PathLike)
from tokenizers import Tokenizer

from yao_agent.connectors.capabilities import cannot_chat
from yao_agent.connectors.classify import model_error
from yao_agent.connectors.deltas import Delta, Embedded
from yao_agent.connectors.request import ModelRequest
from yao_agent.dsl.specs import LOCAL_MODELS, ConnectorSpec

# The shipped files of each model, under the `wordllama` package's folder.
FILES: Mapping[str, tuple[str, str]] = {
    "wordllama-256": ("weights/l2_supercat_256.safetensors", "tokenizers/l2_supercat_tokenizer_config.json"),
}
_TENSOR = "embedding.weight"
_SLICE = 8192  # tokens summed at once: a very long text never makes one matrix of all its tokens' rows

Matrix = npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class LocalModel:
    """A token table and its tokenizer (without padding or truncation: each text is pooled alone)."""

    name: str
    table: Matrix
    tokenizer: Tokenizer

    @property
    def dims(self) -> int:
        return int(self.table.shape[1])

    def embed(self, texts: Sequence[str]) -> tuple[list[list[float]], int]:
        """The texts' unit vectors (a text without tokens: all zeros), and how many tokens they had."""
        encodings = self.tokenizer.encode_batch(list(texts), add_special_tokens=False)
        pooled = np.zeros((len(texts), self.dims), dtype=np.float32)
        last = self.table.shape[0] - 1
        tokens = 0
        for row, encoding in enumerate(encodings):
            ids = np.clip(np.asarray(encoding.ids, dtype=np.int64), 0, last)
            tokens += len(ids)
            for start in range(0, len(ids), _SLICE):
                pooled[row] += self.table[ids[start : start + _SLICE]].sum(axis=0)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        pooled /= np.where(norms > 0, norms, 1.0)
        return pooled.tolist(), tokens


def package_folder() -> Path:
    """Where the `wordllama` package is installed, found without importing it."""
    spec = importlib.util.find_spec("wordllama")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the wordllama package is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def load_model(name: str, folder: Path | None = None) -> LocalModel:
    """Read a model's shipped files (from `folder`, by default the installed package's). Never downloads."""
    weights, tokenizer_file = FILES[name]
    folder = folder or package_folder()
    table = load_file(str(folder / weights))[_TENSOR].astype(np.float32)
    tokenizer = Tokenizer.from_file(str(folder / tokenizer_file))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return LocalModel(name, np.ascontiguousarray(table), tokenizer)


_lock = threading.Lock()
_loaded: dict[str, LocalModel] = {}


def shared_model(name: str) -> LocalModel:
    """The process's one copy of a model, loaded by the first caller (the others wait for it)."""
    with _lock:
        found = _loaded.get(name)
        if found is None:
            found = _loaded[name] = load_model(name)
        return found


class LocalEngine:
    name = "local"

    async def aclose(self) -> None:
        return None  # the table stays loaded for the process's other runtimes

    async def stream(
        self, connector: ConnectorSpec, request: ModelRequest, environ: Mapping[str, str] | None = None
    ) -> AsyncIterator[Delta]:
        raise model_error("bad_request", connector.id, cannot_chat(connector))
        yield  # (unreached: it makes this the generator the protocol has, failing at its first step)

    async def embed(
        self, connector: ConnectorSpec, texts: Sequence[str], environ: Mapping[str, str] | None = None
    ) -> Embedded:
        model = await asyncio.to_thread(_model_for, connector)
        vectors, tokens = await asyncio.to_thread(model.embed, texts)
        return Embedded(vectors, model.name, tokens, connector.id)


def _model_for(connector: ConnectorSpec) -> LocalModel:
    if connector.model not in FILES:
        known = ", ".join(LOCAL_MODELS)
        raise model_error("config", connector.id, f"no local model '{connector.model}' (expected one of: {known})")
    try:
        return shared_model(connector.model)
    except Exception as exc:  # a missing or broken file (the tokenizer's own errors are plain Exceptions)
        raise model_error("config", connector.id, f"cannot load local model '{connector.model}': {exc}") from None
