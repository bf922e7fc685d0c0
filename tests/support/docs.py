"""The documentation's pages (README.md and docs/**/*.md) and their fenced code blocks, for the tests
that check what the pages say and run what they show.

A block may carry a marker, an HTML comment on the line just before it:
`<!-- docs-test: NAME -->` (a test runs it by that name) or `<!-- not-run: why -->` (it cannot run here;
it is still parsed or compiled).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w-]*)\s*$")
MARKER = re.compile(r"^\s*<!-- (?P<kind>docs-test|not-run): (?P<text>.+?) -->\s*$")


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository: README.md, docs/guides/teams.md, ...
    line: int  # of the opening fence, counted from 1
    lang: str
    code: str
    marker: tuple[str, str] | None  # ("docs-test", NAME) or ("not-run", why)

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]


def blocks(path: Path) -> list[Block]:
    """Every fenced block of a page, with the marker just before it."""
    lines = path.read_text("utf-8").splitlines()
    found: list[Block] = []
    at = 0
    while at < len(lines):
        opening = FENCE.match(lines[at])
        if not opening:
            at += 1
            continue
        indent, end = len(opening["indent"]), at + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        code = "".join(line[indent:] + "\n" for line in lines[at + 1 : end])
        before = MARKER.match(lines[at - 1]) if at else None
        marker = (before["kind"], before["text"]) if before else None
        found.append(Block(str(path.relative_to(REPO)), at + 1, opening["lang"], code, marker))
        at = end + 1
    return found


def every_block() -> list[Block]:
    return [block for page in pages() for block in blocks(page)]


def block(name: str) -> str:
    """The code of the block marked `<!-- docs-test: NAME -->`, wherever it is."""
    found = [b for b in every_block() if b.marker == ("docs-test", name)]
    assert len(found) == 1, f"expected one block marked docs-test: {name}, found {[b.where for b in found]}"
    return found[0].code


def text(page: str) -> str:
    """A page of the site (`guides/teams.md`), or README.md."""
    return (REPO / page if page == "README.md" else DOCS / page).read_text("utf-8")
