"""A parsed document cut into chunks for search: none spans two sections, none is over `max_tokens`, and
consecutive chunks of a section overlap by about `overlap_tokens`.

Tokens are counted approximately, without a model's tokenizer: a whitespace-separated word is one token,
and so is each character of the scripts written without spaces (Chinese, Japanese kana).

Where to cut is decided by the text, not by position: a section too long for one chunk is cut at its
strongest boundary — between paragraphs, else sentences, else words — the text before each boundary
choosing among equals (a hash of it), and each part is cut again until it fits. A cut therefore depends
only on the text near it, so editing one paragraph of a long document changes the chunks around that
paragraph and no others: the rest keep their text and digest, and what was stored for them stays good."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass

from yao_agent.errors import UsageError
from yao_agent.knowledge.parse import Parsed

WRITTEN_WITHOUT_SPACES = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # kana and Han ideographs
TOKEN = re.compile(f"[{WRITTEN_WITHOUT_SPACES}]|[^\\s{WRITTEN_WITHOUT_SPACES}]+")
PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")
SENTENCE_END = re.compile(r"[.!?…]+[\"'”’)\]]*\s+|[。！？]+[」』”’)）]*\s*")
HEADING_JOIN = " › "
WORD, SENTENCE, PARAGRAPH = 1, 2, 3  # how strong a boundary is: a cut is made at the strongest one
HASHED_WORDS = 4  # a word boundary is chosen by the words before it, not the one word (too often the same)


@dataclass(frozen=True, slots=True)
class Chunk:
    """One piece of a document, as stored and searched; `digest` is the SHA-256 of its heading and text."""

    seq: int  # its place in the document, from 0
    heading: str  # the section's heading path, joined by " › "
    text: str
    digest: str


@dataclass(frozen=True, slots=True)
class Piece:
    """What cuts never divide (a paragraph that fits, else a sentence that fits, else a word): a span of
    paragraph `paragraph`, and the boundary after it."""

    paragraph: int
    start: int
    end: int
    tokens: int
    strength: int
    key: int


def tokens(text: str) -> int:
    """The approximate token count of `text` (see the module's docstring)."""
    return len(TOKEN.findall(text))


def content_hash(data: bytes) -> str:
    """A file's identity by content: re-adding the same bytes is recognised and does nothing."""
    return hashlib.sha256(data).hexdigest()


def chunks(parsed: Parsed, max_tokens: int = 300, overlap_tokens: int = 40) -> list[Chunk]:
    """The document's chunks in order: each section's cut apart, and each chunk after the first of a section
    starting with the last `overlap_tokens` tokens of the text the one before it added (all of it if less)."""
    if max_tokens < 1 or not 0 <= overlap_tokens <= max_tokens // 2:
        raise UsageError(
            f"chunk: max_tokens must be at least 1 and overlap_tokens from 0 to half of max_tokens "
            f"(got max_tokens: {max_tokens}, overlap_tokens: {overlap_tokens})"
        )
    budget = max_tokens - overlap_tokens  # what a chunk brings new, so that with its overlap it fits
    found: list[Chunk] = []
    for section in parsed.sections:
        heading = HEADING_JOIN.join(section.heading)
        previous = ""
        for body, new_paragraph in bodies(section.text, budget):
            overlap = tail(previous, overlap_tokens)
            joint = "\n\n" if new_paragraph else " "
            text = f"{overlap}{joint}{body}" if overlap else body
            digest = hashlib.sha256(f"{heading}\n{text}".encode()).hexdigest()
            found.append(Chunk(len(found), heading, text, digest))
            previous = body  # (not `text`: an overlap repeats no older chunk, so an edit reaches one chunk on)
    return found


def tail(text: str, count: int) -> str:
    """The last `count` tokens of `text`, as written there."""
    if count <= 0:
        return ""
    found = list(TOKEN.finditer(text))
    return text[found[-count].start() :] if len(found) > count else text


def bodies(text: str, budget: int) -> Iterator[tuple[str, bool]]:
    """A section's text cut into parts of at most `budget` tokens, each with whether it begins a paragraph."""
    paragraphs = [p.strip("\n") for p in PARAGRAPH_BREAK.split(text) if p.strip()]
    pieces = [piece for index, paragraph in enumerate(paragraphs) for piece in split(index, paragraph, budget)]
    for low, high in cuts(pieces, budget):
        parts: list[str] = []
        for index in sorted({piece.paragraph for piece in pieces[low:high]}):
            inside = [piece for piece in pieces[low:high] if piece.paragraph == index]
            parts.append(paragraphs[index][inside[0].start : inside[-1].end])
        yield "\n\n".join(parts), low == 0 or pieces[low - 1].strength == PARAGRAPH


def key(text: str) -> int:
    """A hash of `text` the same in every process (Python's `hash` of a str is not)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def split(index: int, paragraph: str, budget: int) -> list[Piece]:
    """A paragraph as one piece when it fits, else its sentences, each as its words when it does not fit."""
    count = tokens(paragraph)
    if count <= budget:
        return [Piece(index, 0, len(paragraph), count, PARAGRAPH, key(paragraph))]
    pieces: list[Piece] = []
    spans = sentences(paragraph)
    for n, (start, end) in enumerate(spans):
        last = PARAGRAPH if n == len(spans) - 1 else SENTENCE
        sentence = paragraph[start:end]
        count = tokens(sentence)
        if count <= budget:
            pieces.append(Piece(index, start, end, count, last, key(sentence)))
            continue
        words = [(start + m.start(), start + m.end()) for m in TOKEN.finditer(sentence)]
        for w, (begin, finish) in enumerate(words):
            before = paragraph[words[max(0, w - HASHED_WORDS + 1)][0] : finish]
            pieces.append(Piece(index, begin, finish, 1, last if w == len(words) - 1 else WORD, key(before)))
    return pieces


def sentences(paragraph: str) -> list[tuple[int, int]]:
    """Spans of the paragraph's sentences: ended by . ! ? … (or 。！？), not before a lowercase letter."""
    spans: list[tuple[int, int]] = []
    start = 0
    for end in SENTENCE_END.finditer(paragraph):
        following = paragraph[end.end() : end.end() + 1]
        if following.islower() or not paragraph[start : end.end()].strip():
            continue  # "e.g. this" goes on; a sentence needs words
        spans.append((start, start + len(paragraph[start : end.end()].rstrip())))
        start = end.end()
    if paragraph[start:].strip():
        spans.append((start, len(paragraph.rstrip())))
    return spans


def cuts(pieces: list[Piece], budget: int) -> list[tuple[int, int]]:
    """The pieces grouped into runs of at most `budget` tokens, as (first, after last) indexes in order."""
    total = [0]
    for piece in pieces:
        total.append(total[-1] + piece.tokens)
    least = budget // 4  # a cut leaves at least this much on each side when it can: no crumbs of chunks
    runs: list[tuple[int, int]] = []
    todo = [(0, len(pieces))]
    while todo:
        low, high = todo.pop()
        size = total[high] - total[low]
        if size <= budget or high - low == 1:
            runs.append((low, high))
            continue
        sides = {b: (total[b] - total[low], total[high] - total[b]) for b in range(low + 1, high)}
        fair = [b for b, (left, right) in sides.items() if left >= least and right >= least]
        if fair:  # the strongest boundary, the text before it choosing among equals
            cut = max(fair, key=lambda b: (pieces[b - 1].strength, pieces[b - 1].key, -abs(sides[b][0] - sides[b][1])))
        else:  # big pieces: the most even cut
            cut = max(sides, key=lambda b: (min(sides[b]), pieces[b - 1].key))
        todo += [(cut, high), (low, cut)]  # (the left part is cut next: runs come out in order)
    return runs
