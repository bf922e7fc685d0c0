"""Counting the tokens of a chat-completions request before it is sent, offline (CONTRACT §4 item 5).

A model whose tokenizer tiktoken knows (OpenAI's model names) is counted exactly with it. The encoding
files are read from the copy litellm bundles, and only after checking they are there and intact:
tiktoken downloads a missing or damaged file, and nothing may reach the network. Any other model gets
`estimate`, built to err high: measured against every tokenizer at hand (OpenAI's cl100k and o200k, the
Claude and DeepSeek tokenizers litellm bundles) on English, code, JSON, CJK and other scripts, numbers,
hashes, base64 and emoji, it never undercounts by more than 10 % (tests/test_tokens.py measures it).

A request's count adds what its text does not show: a few tokens per message for the role and the
separators (OpenAI's published accounting), tool calls' names and arguments, the tools' JSON schemas,
and a fixed price per image.

tiktoken is imported on first use (the CLI's start-up time matters), and each encoding loaded once.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import json
import math
import os
import re
import threading
from collections.abc import Generator, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from yao_agent.base.jsonvalue import as_list, as_mapping

if TYPE_CHECKING:
    from tiktoken import Encoding

MESSAGE_TOKENS: Final = 4  # role and separators of one message (OpenAI counts 3, and 1 more for a name)
REPLY_TOKENS: Final = 3  # what primes the reply
CALL_TOKENS: Final = 4  # the frame of one tool call, or one tool's definition
# A part that is not text (an image, audio, a file) is priced as a high-detail 1024×1024 image is by
# OpenAI (85 + 4 × 170): its real price depends on its size, which is not looked into here.
PART_TOKENS: Final = 765
_CACHE_SIZE: Final = 4096

# The encodings tiktoken names for the models it knows, and the file each is made from: tiktoken looks
# a file up in its cache directory by the SHA-1 of its URL and accepts it only with this SHA-256.
_URL = "https://openaipublic.blob.core.windows.net/encodings/"
_FILES: Final = {
    "cl100k_base": (_URL + "cl100k_base.tiktoken", "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"),
    "o200k_base": (_URL + "o200k_base.tiktoken", "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"),
    "p50k_base": (_URL + "p50k_base.tiktoken", "94b5ca7dff4d00767bc256fdd1b27e5b17361d7b8a5f968547f9f23eb70d2069"),
}
_MADE_FROM: Final = {"o200k_harmony": "o200k_base", "p50k_edit": "p50k_base"}
_loading = threading.Lock()


class TokenCounter:
    """Counts text, messages and requests for one tokenizer (`exact`), or by `estimate`."""

    def __init__(self, name: str, encoding: Encoding | None = None) -> None:
        self.name = name
        self.exact = encoding is not None
        self._encoding = encoding
        self._cache: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"TokenCounter({self.name!r})"

    def text(self, text: str) -> int:
        # Every text is remembered: a run counts its whole history before each call, and looking a text
        # up measured 25-50 times cheaper than counting it again, however short.
        found = self._cache.get(text)
        if found is None:
            if len(self._cache) >= _CACHE_SIZE:
                self._cache.clear()  # a long chat's texts are counted again once: simpler than an LRU
            found = self._cache[text] = self._count(text)
        return found

    def _count(self, text: str) -> int:
        return len(self._encoding.encode_ordinary(text)) if self._encoding is not None else estimate(text)

    def head(self, text: str, tokens: int) -> str:
        """The longest start of `text` that counts at most `tokens` tokens (for an estimate: nearly)."""
        if self._encoding is not None:
            return self._encoding.decode(self._encoding.encode_ordinary(text)[: max(tokens, 0)])
        total = self.text(text)
        if total <= tokens:
            return text
        size = int(len(text) * tokens / total)
        while size > 0 and estimate(text[:size]) > tokens:
            size = int(size * 0.9)
        return text[:size]

    def content(self, content: object) -> int:
        """A message's content: text, or parts (text parts by their text, any other part at PART_TOKENS)."""
        if isinstance(content, str):
            return self.text(content)
        total = 0
        for part in as_list(content):
            data = as_mapping(part)
            text = data.get("text")
            total += self.text(text) if data.get("type") == "text" and isinstance(text, str) else PART_TOKENS
        return total

    def message(self, message: Mapping[str, Any]) -> int:
        total = MESSAGE_TOKENS + self.content(message.get("content"))
        name = message.get("name")
        if isinstance(name, str):
            total += self.text(name)
        for call in as_list(message.get("tool_calls")):
            function = as_mapping(as_mapping(call).get("function"))
            total += CALL_TOKENS + sum(self.text(str(function.get(key) or "")) for key in ("name", "arguments"))
        return total

    def tools(self, tools: Sequence[Mapping[str, Any]]) -> int:
        """The tools offered, as their JSON: more than the form providers give the model, never less."""
        return sum(CALL_TOKENS + self.text(json.dumps(tool, separators=(",", ":"))) for tool in tools)

    def request(self, messages: Iterable[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = ()) -> int:
        return REPLY_TOKENS + sum(self.message(m) for m in messages) + self.tools(tools)


ESTIMATE = TokenCounter("estimate")


def counter_for(models: Iterable[str]) -> TokenCounter:
    """The counter for a request any of `models` may answer (a fallback chain): their tokenizer when they
    share one that loads offline, else the estimate, which errs high for every one of them."""
    names = {encoding_name(model) for model in models}
    name = names.pop() if len(names) == 1 else None
    return _exact(name) if name is not None else ESTIMATE


def encoding_name(model: str) -> str | None:
    """The tiktoken encoding of a model name (a provider prefix such as `openai/` aside), None if unknown."""
    import tiktoken.model  # on first use: the CLI does not pay for it at start-up

    try:
        return tiktoken.model.encoding_name_for_model(model.rsplit("/", 1)[-1])
    except KeyError:
        return None


@functools.cache
def _exact(name: str) -> TokenCounter:
    encoding = load_encoding(name)
    return TokenCounter(name, encoding) if encoding is not None else ESTIMATE


def load_encoding(name: str, folder: Path | None = None) -> Encoding | None:
    """tiktoken's encoding `name` from its file in `folder` (default: litellm's); None when that file is
    not there intact."""
    url, sha256 = _FILES.get(_MADE_FROM.get(name, name), ("", ""))
    folder = folder or bundled_encodings()
    if not url or folder is None:
        return None
    path = folder / hashlib.sha1(url.encode()).hexdigest()
    try:
        intact = hashlib.sha256(path.read_bytes()).hexdigest() == sha256
    except OSError:
        intact = False
    if not intact:
        return None  # tiktoken would download it
    import tiktoken  # on first use, as in encoding_name

    with _loading, _cache_dir(str(folder)):
        return tiktoken.get_encoding(name)


def bundled_encodings() -> Path | None:
    """The folder of tiktoken files litellm ships, found without importing litellm (seconds of start-up)."""
    spec = importlib.util.find_spec("litellm")
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent / "litellm_core_utils" / "tokenizers"


@contextlib.contextmanager
def _cache_dir(folder: str) -> Generator[None]:
    """tiktoken reads its cache folder from the environment: point it at `folder` while it loads.

    (litellm sets the same variable to the same folder when it is imported.)"""
    before = os.environ.get("TIKTOKEN_CACHE_DIR")
    os.environ["TIKTOKEN_CACHE_DIR"] = folder
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TIKTOKEN_CACHE_DIR", None)
        else:
            os.environ["TIKTOKEN_CACHE_DIR"] = before


# -- the estimate --------------------------------------------------------------------------------------------
#
# ASCII text is cut into the pieces BPE tokenizers seldom merge further (a word of up to five letters, a
# capital and its lower-case letters, one or two capitals, up to three digits, up to three punctuation
# marks, a line break with its indentation, a run of spaces): each piece counts one token. A run that
# looks random (letters of both cases and digits: base64, keys) counts one token per 1.2 characters.
# Other characters count by script, at what the most wasteful tokenizer measured spends on them.
_RANDOM = re.compile(r"[A-Za-z0-9+/_-]{20,}={0,2}")
_PIECE = re.compile(r"[A-Z]?[a-z]{1,5}|[A-Z]{1,2}|[0-9]{1,3}| (?=[0-9])|[!-/:-@\[-`{-~]{1,3}|\r?\n[ \t]*|[ \t]{2,}|\t")
_RANDOM_CHARS_PER_TOKEN: Final = 1.2
_SCRIPTS: Final = tuple(
    (re.compile(pattern), per_char)
    for pattern, per_char in (
        ("[\u0080-\u024f]", 1.0),  # Latin with accents
        ("[\u0370-\u03ff]", 1.35),  # Greek
        ("[\u0400-\u052f]", 0.6),  # Cyrillic
        ("[\u0590-\u08ff]", 1.1),  # Hebrew, Arabic, Syriac
        ("[\u0900-\u0dff]", 1.35),  # the Indic scripts
        ("[\u0e00-\u0eff]", 1.9),  # Thai, Lao
        ("[\u1100-\u11ff\u3130-\u318f\uac00-\ud7af]", 1.5),  # Hangul
        ("[\u2e80-\u9fff\uf900-\ufaff\uff00-\uffef]", 1.2),  # CJK, kana, full-width forms
        ("[\U00010000-\U0010ffff]", 2.5),  # emoji and other characters beyond the BMP
    )
)
_OTHER_PER_CHAR: Final = 1.5  # any other character (symbols, arrows, dingbats)


def estimate(text: str) -> int:
    """Tokens of `text` for an unknown tokenizer, erring high (see the comment above)."""
    extra = 0.0

    def random_run(match: re.Match[str]) -> str:
        nonlocal extra
        run = match.group()
        if run.isalpha() or run.isdigit() or not _mixed(run):
            return run  # words and numbers: counted piece by piece
        extra += len(run) / _RANDOM_CHARS_PER_TOKEN
        return " "

    text = _RANDOM.sub(random_run, text)
    pieces = len(_PIECE.findall(text))
    beyond_ascii = len(text) - len(text.encode("ascii", "ignore"))
    if beyond_ascii:
        matched = 0
        for pattern, per_char in _SCRIPTS:
            found = len(pattern.findall(text))
            matched += found
            extra += found * per_char
        extra += (beyond_ascii - matched) * _OTHER_PER_CHAR
    return math.ceil(pieces + extra)


def _mixed(run: str) -> bool:
    return any(c.isdigit() for c in run) and any(c.isupper() for c in run) and any(c.islower() for c in run)
