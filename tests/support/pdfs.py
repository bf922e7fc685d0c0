"""Small real PDFs built by hand for the knowledge tests: `pdf(["page one", "page two"], title="Handbook")`.

Written object by object with a correct cross-reference table, so pypdf reads them without a warning. The
text is set in Helvetica, one of the fonts every reader has, whose encoding covers Latin-1 only."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path

Outline = Sequence[tuple[tuple[str, ...], int]]  # (heading path, page index), in reading order


def pdf(pages: list[str], title: str | None = None, *, outline: Outline = ()) -> bytes:
    """A PDF with one page per string (its lines as given, long ones wrapped), its Info
    title, and bookmarks: `outline=[(("Leave",), 0), (("Leave", "Sick leave"), 1)]` nests the second."""
    font = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>"
    objects: list[bytes] = [b"", b"", font]  # the catalog and the page tree, written once the pages are known
    page_ids: list[int] = []
    for text in pages:
        stream = _content(text)
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream))
        objects.append(b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R "
                       b"/Resources << /Font << /F1 3 0 R >> >> >>" % len(objects))  # fmt: skip
        page_ids.append(len(objects))
    kids = b" ".join(b"%d 0 R" % i for i in page_ids)
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, len(page_ids))
    outlines = _outline(objects, outline, page_ids) if outline else b""
    objects[0] = b"<< /Type /Catalog /Pages 2 0 R%s >>" % outlines
    info = b""
    if title is not None:
        objects.append(b"<< /Title %s >>" % _text_string(title))
        info = b" /Info %d 0 R" % len(objects)
    return _file(objects, info)


def facilities_guide(folder: Path) -> Path:
    """A one-page PDF a team admin adds to the team's knowledge in the page tests: where Acme staff park."""
    document = folder / "facilities.pdf"
    document.write_bytes(pdf(["Parking for Acme staff is on level 2 of the tower, bays 200 to 260."],
                             title="Facilities guide"))  # fmt: skip
    return document


def _content(text: str) -> bytes:
    """The page's content stream: the text top-down, one `Tj` a line, 14 points apart."""
    ops = [b"BT /F1 11 Tf 14 TL 72 750 Td"]
    for paragraph in text.split("\n\n"):
        for line in (part for given in paragraph.split("\n") for part in textwrap.wrap(given, 90)):
            ops.append(b"(%s) Tj T*" % _escape(line.encode("cp1252")))
        ops.append(b"T*")
    ops.append(b"ET")
    return b"\n".join(ops)


def _escape(raw: bytes) -> bytes:
    return raw.replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)")


def _text_string(text: str) -> bytes:
    """A PDF text string any reader decodes: UTF-16BE with its byte-order mark, in hex."""
    return b"<FEFF%s>" % text.encode("utf-16-be").hex().upper().encode()


def _outline(objects: list[bytes], entries: Outline, page_ids: list[int]) -> bytes:
    """Append the bookmark objects (a tree by heading path) and return the catalog's `/Outlines` entry."""
    objects.append(b"")  # the outline root, written once its children are known
    root = len(objects)
    children: dict[int, list[int]] = {root: []}
    parents: dict[tuple[str, ...], int] = {(): root}
    fields: dict[int, dict[str, bytes]] = {}
    for path, page in entries:
        parent = parents[path[:-1]]
        objects.append(b"")
        item = len(objects)
        children[parent].append(item)
        children[item] = []
        parents[path] = item
        fields[item] = {"Title": _text_string(path[-1]), "Parent": b"%d 0 R" % parent,
                        "Dest": b"[%d 0 R /Fit]" % page_ids[page]}  # fmt: skip
    fields[root] = {"Type": b"/Outlines"}
    for parent, kids in children.items():
        if kids:
            fields[parent] |= {"First": b"%d 0 R" % kids[0], "Last": b"%d 0 R" % kids[-1], "Count": b"%d" % len(kids)}
        for before, after in pairwise(kids):
            fields[before]["Next"] = b"%d 0 R" % after
            fields[after]["Prev"] = b"%d 0 R" % before
    for number, entry in fields.items():
        objects[number - 1] = b"<< %s >>" % b" ".join(b"/%s %s" % (k.encode(), v) for k, v in entry.items())
    return b" /Outlines %d 0 R" % root


def _file(objects: list[bytes], info: bytes) -> bytes:
    """Header, numbered objects, the cross-reference table of their byte offsets, and the trailer."""
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets: list[int] = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R%s >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, info, xref)
    return bytes(out)
