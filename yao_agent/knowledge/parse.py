"""A document's title and text, in sections named by their heading path, from the bytes of a file.

The kind is told by the file's extension: Markdown, plain text, HTML or PDF. A file that is of no such kind,
or cannot be read as the kind its name says, is a `UsageError` that names it and says what was expected.
Text is kept in blocks (paragraphs, lists, code, table rows) separated by a blank line, which is where
the chunker cuts first; inside a paragraph, runs of whitespace become one space."""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache
from html.parser import HTMLParser
from pathlib import PurePath
from typing import TYPE_CHECKING, cast

from yao_agent.errors import UsageError

if TYPE_CHECKING:
    from markdown_it import MarkdownIt
    from markdown_it.token import Token
    from pypdf import PdfReader
    from pypdf.generic import Destination

TITLE_CHARS = 150  # a plain text's first line longer than this is a paragraph, not its title


@dataclass(frozen=True, slots=True)
class Section:
    """Text under one heading; `heading` is the path of headings above it, outermost first (empty before any)."""

    heading: tuple[str, ...]
    text: str


@dataclass(frozen=True, slots=True)
class Parsed:
    title: str
    sections: tuple[Section, ...]


def parse(name: str, data: bytes) -> Parsed:
    """The title and sections of the file `name` (its extension tells the kind) holding `data`."""
    suffix = PurePath(name).suffix.lower()
    reader = READERS.get(suffix)
    if reader is None:
        kind = f"{suffix} files" if suffix else "a file without an extension"
        raise UsageError(f"{name}: cannot read {kind}; supported: {', '.join(sorted(READERS))}")
    parsed = reader(name, data)
    if not parsed.sections:
        hint = " (a scanned PDF's pages are images: run OCR on it first)" if suffix == ".pdf" else ""
        raise UsageError(f"{name} has no text{hint}")
    return parsed


def space(text: str) -> str:
    """Runs of whitespace (any Unicode space, line breaks too) as one space, and none at the ends."""
    return " ".join(text.split())


def stem(name: str) -> str:
    return PurePath(name).stem or name


def decode(name: str, data: bytes) -> str:
    """UTF-8 text (a byte-order mark is dropped), without NULs, with `\\n` line ends."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise UsageError(f"{name}: not UTF-8 text (byte {e.start} is 0x{data[e.start]:02x}); save it as UTF-8") from e
    return text.replace("\x00", "").replace("\r\n", "\n").replace("\r", "\n")


class Outline:
    """Sections as the headings come: a heading closes the section before it and sets the path."""

    def __init__(self) -> None:
        self.path: list[tuple[int, str]] = []
        self.blocks: list[str] = []
        self.done: list[Section] = []
        self.first_h1 = ""

    def heading(self, level: int, title: str) -> None:
        if not title:
            return  # an empty heading names nothing: its text stays with the section above
        self.close()
        while self.path and self.path[-1][0] >= level:
            self.path.pop()
        self.path.append((level, title))
        if level == 1 and not self.first_h1:
            self.first_h1 = title

    def block(self, text: str) -> None:
        if text.strip():
            self.blocks.append(text.strip("\n").rstrip())  # (code keeps the indent of its first line)

    def close(self) -> None:
        if self.blocks:
            self.done.append(Section(tuple(title for _, title in self.path), "\n\n".join(self.blocks)))
            self.blocks = []

    def sections(self) -> tuple[Section, ...]:
        self.close()
        return tuple(self.done)


def code(text: str) -> str:
    """Code or preformatted text: its lines as they are, without trailing spaces or blank lines at the ends."""
    return "\n".join(line.rstrip() for line in text.strip("\n").split("\n"))


# ---- plain text


def read_text(name: str, data: bytes) -> Parsed:
    text = decode(name, data)
    blocks = [block for paragraph in re.split(r"\n\s*\n", text) if (block := space(paragraph))]
    first = space(text.strip().split("\n", 1)[0])
    title = first if first and len(first) <= TITLE_CHARS else stem(name)
    return Parsed(title, (Section((), "\n\n".join(blocks)),) if blocks else ())


# ---- Markdown

FRONT_MATTER = re.compile(r"\A---[ \t]*\n(.*?)\n(?:---|\.\.\.)[ \t]*(?:\n|\Z)", re.S)
FRONT_TITLE = re.compile(r"^title:[ \t]*(.+?)[ \t]*$", re.M)


@cache
def markdown() -> MarkdownIt:
    from markdown_it import MarkdownIt  # imported when a Markdown file comes, not with the package

    return MarkdownIt("commonmark").enable("table")


def read_markdown(name: str, data: bytes) -> Parsed:
    text = decode(name, data)
    title = ""
    if front := FRONT_MATTER.match(text):  # YAML front matter: its `title:` is the title, the rest is not text
        text = text[front.end() :]
        if found := FRONT_TITLE.search(front[1]):
            title = space(found[1].strip("'\""))
    walk = MarkdownWalk()
    for token in markdown().parse(text):
        walk.token(token)
    sections = walk.outline.sections()
    return Parsed(title or walk.outline.first_h1 or stem(name), sections)


def inline(token: Token) -> str:
    """An inline token's words without their markup: link text, image alt text, code spans."""
    parts: list[str] = []
    for child in token.children or []:
        if child.type in ("text", "code_inline"):
            parts.append(child.content)
        elif child.type == "image":
            parts.append(inline(child) or child.content)
        elif child.type in ("softbreak", "hardbreak", "html_inline"):
            parts.append(" ")  # (an inline tag such as <br> still parts two words)
    return space("".join(parts))


class MarkdownWalk:
    """markdown-it's flat token stream, read in order: headings make the path, the rest becomes blocks."""

    def __init__(self) -> None:
        self.outline = Outline()
        self.level = 0  # of the heading being read
        self.markers: list[str] = []  # the marker of the item being read, per open list
        self.lines: list[str] = []  # the open list's lines, one block when it closes
        self.rows: list[str] = []  # the open table's, likewise
        self.row: list[str] | None = None
        self.handlers: dict[str, Callable[[Token], None]] = {
            "heading_open": self.heading_open, "inline": self.inline, "bullet_list_open": self.list_open,
            "ordered_list_open": self.list_open, "bullet_list_close": self.list_close,
            "ordered_list_close": self.list_close, "list_item_open": self.item_open, "fence": self.code,
            "code_block": self.code, "html_block": self.html, "tr_open": self.row_open, "tr_close": self.row_close,
            "table_close": self.table_close,
        }  # fmt: skip

    def token(self, token: Token) -> None:
        if handler := self.handlers.get(token.type):
            handler(token)

    def emit(self, text: str) -> None:
        """A block of the section, or lines of the list it is in (indented under the item's marker)."""
        if not self.markers:
            self.outline.block(text)
            return
        depth = "  " * (len(self.markers) - 1)
        first, self.markers[-1] = self.markers[-1] or "  ", ""  # an item's later blocks are indented only
        self.lines.extend(f"{depth}{first if i == 0 else '  '}{line}" for i, line in enumerate(text.split("\n")))

    def heading_open(self, token: Token) -> None:
        self.level = int(token.tag[1:])

    def inline(self, token: Token) -> None:
        text = inline(token)
        if self.level:
            self.outline.heading(self.level, text)
            self.level = 0
        elif self.row is not None:
            self.row.append(text)
        elif text:
            self.emit(text)

    def list_open(self, token: Token) -> None:
        self.markers.append("")

    def list_close(self, token: Token) -> None:
        self.markers.pop()
        if not self.markers:
            self.outline.block("\n".join(self.lines))
            self.lines = []

    def item_open(self, token: Token) -> None:
        self.markers[-1] = f"{token.info}{token.markup} " if token.info else "- "

    def code(self, token: Token) -> None:
        self.emit(code(token.content))

    def html(self, token: Token) -> None:
        walk = HtmlWalk()  # HTML in Markdown: its text, read as an HTML file's is
        walk.feed(token.content)
        walk.close()
        for section in walk.outline.sections():
            self.emit(section.text)

    def row_open(self, token: Token) -> None:
        self.row = []

    def row_close(self, token: Token) -> None:
        if self.row is not None and any(self.row):
            self.rows.append(" | ".join(self.row))
        self.row = None

    def table_close(self, token: Token) -> None:
        rows, self.rows = self.rows, []
        self.emit("\n".join(rows))


# ---- HTML

SKIPPED = frozenset({"script", "style", "nav", "noscript", "template", "svg"})
HEADINGS = {f"h{level}": level for level in range(1, 7)}
BLOCKS = frozenset({
    "address", "article", "aside", "blockquote", "body", "caption", "dd", "details", "dialog", "div", "dl", "dt",
    "fieldset", "figcaption", "figure", "footer", "form", "header", "hr", "html", "legend", "main", "p",
    "section", "summary",
})  # fmt: skip
CONTAINERS = frozenset({"ul", "ol", "table"})  # their items or rows are lines of one block


def read_html(name: str, data: bytes) -> Parsed:
    walk = HtmlWalk()
    walk.feed(decode(name, data))
    walk.close()
    sections = walk.outline.sections()
    return Parsed(walk.title or walk.outline.first_h1 or stem(name), sections)


class HtmlWalk(HTMLParser):
    """Text by headings (h1–h6 make the path), without scripts, styles and navigation; the <title> apart."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.outline = Outline()
        self.title = ""
        self.skip = 0  # depth inside skipped elements
        self.titling: list[str] | None = None  # the <title> being read
        self.text: list[str] = []  # the inline text being read
        self.level = 0  # of the heading being read
        self.pre = 0
        self.containers = 0
        self.lines: list[str] = []
        self.cells: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title" and not self.skip:
            self.titling = []
        elif tag in SKIPPED:
            self.skip += 1
        elif self.skip:
            return
        elif tag == "br":
            self.text.append("\n" if self.pre else " ")
        elif tag in HEADINGS:
            self.flush()
            self.level = HEADINGS[tag]
        elif tag in ("td", "th"):
            self.flush()  # (the cell before may be left unclosed)
        elif tag in ("li", "tr", "pre") or tag in BLOCKS or tag in CONTAINERS:
            self.flush()
            if tag == "tr":
                self.end_row()  # (the row before may be left unclosed)
                self.cells = []
            self.containers += tag in CONTAINERS
            self.pre += tag == "pre"

    def handle_endtag(self, tag: str) -> None:
        if tag == "title" and self.titling is not None:
            self.title, self.titling = space("".join(self.titling)), None
        elif tag in SKIPPED:
            self.skip = max(0, self.skip - 1)
        elif self.skip:
            return
        elif tag in HEADINGS and self.level:
            self.outline.heading(self.level, space("".join(self.text)))
            self.text, self.level = [], 0
        elif tag in ("td", "th"):
            self.flush()
        elif tag in ("li", "tr", "pre") or tag in BLOCKS or tag in CONTAINERS:
            self.end_block(tag)

    def end_block(self, tag: str) -> None:
        self.flush()
        if tag in ("tr", "table"):
            self.end_row()
        self.pre = max(0, self.pre - (tag == "pre"))
        if tag in CONTAINERS and self.containers:
            self.containers -= 1
            if not self.containers:
                self.outline.block("\n".join(self.lines))
                self.lines = []

    def end_row(self) -> None:
        if self.cells:
            self.lines.append(" | ".join(self.cells))
        self.cells = None

    def handle_data(self, data: str) -> None:
        if self.titling is not None:
            self.titling.append(data)
        elif not self.skip:
            self.text.append(data)

    def flush(self) -> None:
        """The inline text read so far ends: a paragraph, a list item's line, or part of a table cell."""
        if self.level:
            return  # (a block inside a heading is part of the heading)
        raw, self.text = "".join(self.text), []
        text = code(raw) if self.pre else space(raw)
        if not text:
            return
        if self.cells is not None:
            self.cells.append(text)
        elif self.containers:
            self.lines.append(f"- {text}")
        else:
            self.outline.block(text)

    def close(self) -> None:
        super().close()
        self.flush()
        self.end_row()
        if self.lines:
            self.outline.block("\n".join(self.lines))
            self.lines = []


# ---- PDF

HYPHENATED = re.compile(r"(\w)-\n(\w)")


def read_pdf(name: str, data: bytes) -> Parsed:
    from pypdf import PdfReader  # imported when a PDF comes: the package loads without it

    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not _opens_without_password(reader):
            raise UsageError(f"{name}: the PDF is encrypted with a password; save a copy without one")
        pages = [page_text(page.extract_text()) for page in reader.pages]
        starts = bookmarks_of(reader)
        title = space(str(reader.metadata.title or "")) if reader.metadata else ""
    except UsageError:
        raise
    except Exception as e:  # pypdf fails on broken files in many ways (its own errors, KeyError, ValueError…)
        raise UsageError(f"{name}: not a readable PDF ({type(e).__name__}: {e})") from e
    sections = tuple(Section(page_heading(i, starts), text) for i, text in enumerate(pages) if text)
    return Parsed(title or stem(name), sections)


def _opens_without_password(reader: PdfReader) -> bool:
    """Many PDFs are encrypted only to set permissions, with an empty password that opens them."""
    try:
        return bool(reader.decrypt(""))
    except Exception:  # an encryption pypdf cannot undo is, to the user, the same refusal
        return False


def page_text(raw: str) -> str:
    """A page's paragraphs, with words a line end hyphenated joined again."""
    raw = HYPHENATED.sub(lambda m: m[1] + m[2] if m[2].islower() else m[0], raw.replace("\x00", ""))
    return "\n\n".join(text for paragraph in re.split(r"\n\s*\n", raw) if (text := space(paragraph)))


def bookmarks_of(reader: PdfReader) -> list[tuple[int, tuple[str, ...]]]:
    """The bookmarks, or none when they are damaged: the pages' text is still good, only named "Page N"."""
    try:
        return bookmarks(reader)
    except Exception:
        return []


def bookmarks(reader: PdfReader) -> list[tuple[int, tuple[str, ...]]]:
    """Where each bookmark begins: (page index, its heading path), ordered by page, then reading order."""
    starts: list[tuple[int, tuple[str, ...]]] = []

    def walk(items: Iterable[object], parent: tuple[str, ...]) -> None:
        last = parent
        for item in items:
            if isinstance(item, list):  # the children of the bookmark before it
                walk(cast("list[object]", item), last)
                continue
            bookmark = cast("Destination", item)
            title = space(str(bookmark.title or ""))
            last = (*parent, title) if title else parent  # (an untitled one's children go to its parent)
            if not title:
                continue
            page = reader.get_destination_page_number(bookmark)
            if page is not None and page >= 0:
                starts.append((page, last))

    walk(reader.outline, ())
    return sorted(starts, key=lambda start: start[0])  # (stable: reading order within a page)


def page_heading(index: int, starts: list[tuple[int, tuple[str, ...]]]) -> tuple[str, ...]:
    """The first bookmark that begins on the page, else the last one begun before it, else "Page N"."""
    on_page = [path for page, path in starts if page == index]
    if on_page:
        return on_page[0]
    before = [path for page, path in starts if page < index]
    return before[-1] if before else (f"Page {index + 1}",)


READERS: dict[str, Callable[[str, bytes], Parsed]] = {
    ".md": read_markdown, ".markdown": read_markdown, ".txt": read_text, ".html": read_html, ".htm": read_html,
    ".pdf": read_pdf,
}  # fmt: skip
