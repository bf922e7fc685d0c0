"""A document's bytes become a title and sections by heading path, whatever its kind; a file that cannot be
read says which file and what was expected."""

from __future__ import annotations

import io

import pytest
from pypdf import PdfWriter

from tests.support.pdfs import pdf
from yao_agent.errors import UsageError
from yao_agent.knowledge.parse import Parsed, Section, parse

HANDBOOK_MD = """\
Read this first.

# Handbook

## Leave

Everyone gets   25 days
a year.

### Sick leave

Tell your manager **before** 10:00, see [the form](https://example.com/form).

- call in
- send the form
  1. online
  2. on paper

## Expenses

| item | limit |
|------|-------|
| taxi | 50 € |

```python
def claim():

    return "receipt"
```

<div class="note">Keep <em>receipts</em>.</div>
<script>track("expenses")</script>
"""


def headings(parsed: Parsed) -> list[tuple[str, ...]]:
    return [section.heading for section in parsed.sections]


def text_of(parsed: Parsed, *heading: str) -> str:
    return next(section.text for section in parsed.sections if section.heading == heading)


def encrypted(password: str) -> bytes:
    writer = PdfWriter(clone_from=io.BytesIO(pdf(["Salaries by team."])))
    writer.encrypt(user_password=password, owner_password="owner", algorithm="AES-256")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


# ---- Markdown


def test_markdown_headings_make_the_path_of_the_text_under_them() -> None:
    parsed = parse("docs/handbook.md", HANDBOOK_MD.encode())
    assert parsed.title == "Handbook"
    leave = ("Handbook", "Leave")
    assert headings(parsed) == [(), leave, (*leave, "Sick leave"), ("Handbook", "Expenses")]
    assert text_of(parsed) == "Read this first."
    assert text_of(parsed, "Handbook", "Leave") == "Everyone gets 25 days a year."


def test_markdown_keeps_the_words_of_links_lists_tables_and_code_without_their_markup() -> None:
    parsed = parse("handbook.md", HANDBOOK_MD.encode())
    assert text_of(parsed, "Handbook", "Leave", "Sick leave") == (
        "Tell your manager before 10:00, see the form.\n\n- call in\n- send the form\n  1. online\n  2. on paper"
    )
    expenses = text_of(parsed, "Handbook", "Expenses")
    assert expenses.startswith("item | limit\ntaxi | 50 €\n\n")
    assert 'def claim():\n\n    return "receipt"' in expenses  # code keeps its lines and indents
    assert expenses.endswith("\n\nKeep receipts.")  # HTML in Markdown: its text, not its tags or scripts


def test_markdown_takes_its_title_from_front_matter_else_the_first_h1_else_the_file_name() -> None:
    front = "---\ntitle: 'Travel policy'\nowner: hr\n---\n# Travel\n\nBook early.\n"
    assert parse("travel.md", front.encode()) == Parsed("Travel policy", (Section(("Travel",), "Book early."),))
    assert parse("notes/travel-2026.markdown", b"## Trains\n\nSecond class.\n").title == "travel-2026"


def test_markdown_headings_that_skip_a_level_still_nest_and_a_shallower_one_closes_them() -> None:
    parsed = parse("a.MD", b"# A\n\n### A3\n\none\n\n## B\n\ntwo\n\n# C\n\nthree\n")
    assert headings(parsed) == [("A", "A3"), ("A", "B"), ("C",)]


def test_markdown_images_give_their_alt_text_and_an_empty_heading_names_nothing() -> None:
    parsed = parse("org.md", b"# Team\n\n![Org chart](org.png)\n\n#\n\nStill the team.\n")
    assert parsed.sections == (Section(("Team",), "Org chart\n\nStill the team."),)


# ---- plain text


def test_plain_text_is_paragraphs_under_no_heading_titled_by_its_first_line() -> None:
    data = "\ufeffOffice hours\r\n\r\nWe open at 9\r\nand close at   5.\x00\n\n\n\nWeekends: closed.\n".encode()
    assert parse("hours.txt", data) == Parsed(
        "Office hours", (Section((), "Office hours\n\nWe open at 9 and close at 5.\n\nWeekends: closed."),)
    )


def test_a_plain_text_whose_first_line_is_a_long_paragraph_is_titled_by_its_file_name() -> None:
    assert parse("minutes.txt", ("word " * 60).encode()).title == "minutes"


# ---- HTML

PAGE = """<!doctype html>
<html><head><title>Benefits &amp; perks</title><style>p { color: red }</style>
<script>var tracking = "secret";</script></head>
<body><nav><a href="/">Home</a> <a href="/about">About</a></nav>
<h1>Benefits</h1><p>Lunch is&nbsp;free <b>every</b><br>day.</p>
<h2>Gym <small>(2026)</small></h2><ul><li>Pool<li>Sauna<ul><li>Dry</li></ul></ul>
<table><tr><th>Plan<th>Cost<tr><td>Basic<td><p>0 €</p></table>
<pre>  mon  9-17
  tue  9-17</pre>
<noscript>Turn on JavaScript</noscript>
<h2>Bikes</h2><div>Ask <i>Jo</i>.</div></body></html>"""


def test_html_headings_make_the_path_and_scripts_styles_and_navigation_are_not_text() -> None:
    parsed = parse("benefits.html", PAGE.encode())
    assert parsed.title == "Benefits & perks"
    assert headings(parsed) == [("Benefits",), ("Benefits", "Gym (2026)"), ("Benefits", "Bikes")]
    assert text_of(parsed, "Benefits") == "Lunch is free every day."
    assert text_of(parsed, "Benefits", "Gym (2026)") == (
        "- Pool\n- Sauna\n- Dry\n\nPlan | Cost\nBasic | 0 €\n\n  mon  9-17\n  tue  9-17"
    )
    assert text_of(parsed, "Benefits", "Bikes") == "Ask Jo."
    everything = " ".join(section.text for section in parsed.sections)
    for hidden in ("secret", "color", "Home", "About", "JavaScript"):
        assert hidden not in everything


def test_html_without_a_title_element_is_titled_by_its_first_h1_else_its_file_name() -> None:
    assert parse("a.htm", "<h2>Intro</h2><p>x</p><h1>Café</h1><p>y</p>".encode()).title == "Café"
    assert parse("site/page.htm", b"<p>Just text.</p>") == Parsed("page", (Section((), "Just text."),))


def test_html_left_unclosed_is_read_as_a_browser_shows_it() -> None:
    page = "<h2>Office <div>hours</div></h2><ul><li>Mon<li>Tue<table><tr><td>a<td>b<tr><td>c"
    assert parse("p.html", page.encode()).sections == (Section(("Office hours",), "- Mon\n- Tue\na | b\nc"),)


# ---- PDF


def test_a_pdf_is_a_section_a_page_titled_from_its_metadata() -> None:
    pages = ["Welcome to the caf\u00e9.\nWe start at nine.", "", "Holidays are announ-\nced in May."]
    data = pdf(pages, title="Staff guide")
    assert parse("guide.pdf", data) == Parsed(
        "Staff guide",
        (  # the empty page has no section; a word hyphenated at a line's end is one word again
            Section(("Page 1",), "Welcome to the café. We start at nine."),
            Section(("Page 3",), "Holidays are announced in May."),
        ),
    )


def test_a_pdf_without_a_title_in_its_metadata_is_titled_by_its_file_name() -> None:
    assert parse("scans/2026-report.PDF", pdf(["Numbers."])).title == "2026-report"


def test_a_pdfs_bookmarks_name_the_sections_of_their_pages() -> None:
    outline = [(("Leave",), 1), (("Leave", "Sick leave"), 2), (("Leave", "Parental"), 2), (("Pay",), 3)]
    data = pdf(["Cover.", "Leave rules.", "Sick and parental.", "Pay day.", "More pay."], outline=outline)
    assert headings(parse("h.pdf", data)) == [
        ("Page 1",),  # before the first bookmark
        ("Leave",),
        ("Leave", "Sick leave"),  # the first bookmark that begins on the page
        ("Pay",),
        ("Pay",),  # the last one begun before the page
    ]


def test_a_pdf_bookmark_without_a_title_names_nothing_and_its_children_hang_from_its_parent() -> None:
    outline = [(("",), 0), (("", "Scope"), 1)]
    assert headings(parse("h.pdf", pdf(["Cover.", "Scope."], outline=outline))) == [("Page 1",), ("Scope",)]


def test_a_pdf_encrypted_only_to_set_permissions_opens_with_its_empty_password() -> None:
    assert parse("open.pdf", encrypted("")).sections == (Section(("Page 1",), "Salaries by team."),)


# ---- bad input


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        ("report.docx", b"PK", "report.docx: cannot read .docx files; supported: .htm, .html, .markdown, .md, .pdf"),
        ("README", b"hello", "README: cannot read a file without an extension; supported: .htm, .html,"),
        ("legacy.txt", "Caf\u00e9".encode("latin-1"), "legacy.txt: not UTF-8 text (byte 3 is 0xe9); save it as UTF-8"),
        ("legacy.md", b"# T\xff", "legacy.md: not UTF-8 text (byte 3 is 0xff)"),
        ("legacy.html", b"<p>\x80</p>", "legacy.html: not UTF-8 text"),
        ("broken.pdf", b"%PDF-1.4\nthis is not a PDF", "broken.pdf: not a readable PDF ("),
        ("cut.pdf", pdf(["A page."])[:120], "cut.pdf: not a readable PDF ("),
        ("pay.pdf", encrypted("secret"), "pay.pdf: the PDF is encrypted with a password; save a copy without one"),
        ("empty.txt", b"", "empty.txt has no text"),
        ("blank.md", b"\n\n   \n\x00", "blank.md has no text"),
        ("headings.md", b"# Only\n\n## Headings\n", "headings.md has no text"),
        ("script.html", b"<script>x()</script><nav>Home</nav>", "script.html has no text"),
        ("scan.pdf", pdf(["", ""]), "scan.pdf has no text (a scanned PDF's pages are images: run OCR on it first)"),
    ],
)
def test_a_file_that_cannot_be_read_is_a_usage_error_naming_it_and_what_was_expected(
    name: str, data: bytes, message: str
) -> None:
    with pytest.raises(UsageError) as caught:
        parse(name, data)
    assert str(caught.value).startswith(message)


# ---- Unicode


def test_text_in_any_script_comes_through_whole() -> None:
    md = "# 休暇 🌴\n\n## Congé maladie\n\n年次有給休暇は二十日です。Ελληνικά\u00a0κείμενο.\n"
    parsed = parse("休暇.md", md.encode())
    assert parsed.sections == (Section(("休暇 🌴", "Congé maladie"), "年次有給休暇は二十日です。Ελληνικά κείμενο."),)
    assert parse("ru.html", "<title>Отпуск</title><h1>Правила</h1><p>Двадцать дней.</p>".encode()) == Parsed(
        "Отпуск", (Section(("Правила",), "Двадцать дней."),)
    )
    assert parse("guide.pdf", pdf(["x"], title="Guide — été 🌞")).title == "Guide — été 🌞"
