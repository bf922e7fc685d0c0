"""Documents cut into chunks: within sections, within `max_tokens`, overlapping, and cut where the text
decides, so that an edit changes only the chunks around it."""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys

import pytest

from tests.support import REPO
from yao_agent.errors import UsageError
from yao_agent.knowledge.chunk import Chunk, chunks, content_hash, tokens
from yao_agent.knowledge.parse import Parsed, Section

VOCABULARY = [
    *("leave", "policy", "employee", "days", "paid", "sick", "manager", "request", "approval", "team", "holiday"),
    *("notice", "year", "month", "week", "salary", "office", "remote", "work", "contract", "payroll", "benefit"),
    *("travel", "expense", "receipt", "limit", "meeting", "report", "review", "budget"),
]


def sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(VOCABULARY) for _ in range(rng.randint(4, 28))).capitalize() + "."


def paragraphs(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(sentence(rng) for _ in range(rng.randint(1, 9))) for _ in range(count)]


def document(*sections: tuple[tuple[str, ...], list[str]]) -> Parsed:
    return Parsed("Handbook", tuple(Section(heading, "\n\n".join(paras)) for heading, paras in sections))


def words(text: str) -> str:
    return " ".join(text.split())


def added(found: list[Chunk], overlap_tokens: int) -> list[str]:
    """What each chunk of one section adds, its words checked to begin with the last `overlap_tokens` words
    the chunk before it added."""
    bodies: list[str] = []
    for chunk in found:
        overlap = " ".join(bodies[-1].split()[-overlap_tokens:]) if bodies and overlap_tokens else ""
        assert words(chunk.text).startswith(overlap)
        bodies.append(words(chunk.text)[len(overlap) :].strip())
    return bodies


def test_a_short_section_is_one_chunk_named_by_its_heading_path() -> None:
    parsed = document((("Leave", "Sick leave"), ["Call your manager.", "Send the form."]), ((), ["Intro."]))
    assert chunks(parsed) == [
        Chunk(0, "Leave › Sick leave", "Call your manager.\n\nSend the form.",
              hashlib.sha256("Leave › Sick leave\nCall your manager.\n\nSend the form.".encode()).hexdigest()),
        Chunk(1, "", "Intro.", hashlib.sha256(b"\nIntro.").hexdigest()),
    ]  # fmt: skip


def test_tokens_are_words_and_each_character_of_scripts_written_without_spaces() -> None:
    assert tokens("Paid  leave:\n25 days.") == 4
    assert tokens("有給休暇は二十日") == 8
    assert tokens("Pay 給料 day") == 4


def test_a_chunk_never_holds_text_of_two_sections() -> None:
    leave, pay = paragraphs(1, 12), paragraphs(2, 12)
    found = chunks(document((("Leave",), leave), (("Pay",), pay)), max_tokens=120, overlap_tokens=20)
    assert [c.seq for c in found] == list(range(len(found)))
    for heading, paras in (("Leave", leave), ("Pay", pay)):
        own = [c for c in found if c.heading == heading]
        assert len(own) > 2
        words = set(" ".join(paras).split())
        assert all(set(c.text.split()) <= words for c in own)
    first_of_pay = next(c for c in found if c.heading == "Pay")
    assert first_of_pay.text.startswith(pay[0][:40])  # no overlap carried across the section break


@pytest.mark.parametrize(("max_tokens", "overlap_tokens"), [(300, 40), (100, 0), (60, 30), (20, 5), (1, 0)])
def test_no_chunk_is_over_max_tokens_and_together_they_hold_all_the_text(max_tokens: int, overlap_tokens: int) -> None:
    paras = paragraphs(3, 30)
    paras[4] = " ".join(paras[4:9])  # one paragraph longer than any chunk
    paras[10] = " ".join(VOCABULARY * 12)  # a "sentence" of 360 words: cut between words
    found = chunks(document(((), paras)), max_tokens, overlap_tokens)
    assert max(tokens(c.text) for c in found) <= max_tokens
    assert words(" ".join(added(found, overlap_tokens))) == words(" ".join(paras))


def test_a_long_section_is_cut_between_paragraphs_then_between_sentences() -> None:
    paras = paragraphs(4, 40)
    paras[20] = " ".join(sentence(random.Random(i)) for i in range(40))  # ~650 words in one paragraph
    found = chunks(document(((), paras)), max_tokens=150, overlap_tokens=0)
    whole = [c for c in found if "\n\n" in c.text or c.text in paras]
    assert len(whole) > len(found) / 2
    for chunk in found:
        for part in chunk.text.split("\n\n"):  # every chunk is whole paragraphs, or whole sentences of one
            assert part in paras or any(p.startswith(part) or f". {part}" in p for p in paras)
            assert part.endswith(".")


def test_a_full_stop_before_a_lowercase_word_ends_no_sentence() -> None:
    rng = random.Random(10)
    example = [f"{sentence(rng)[:-1]}, e.g. the {rng.choice(VOCABULARY)} of v2.1 {sentence(rng)}" for _ in range(30)]
    text = " ".join(example)
    found = chunks(document(((), [text])), max_tokens=60, overlap_tokens=0)
    assert len(found) > 10
    assert all(chunk.text[0].isupper() and chunk.text.endswith(".") for chunk in found)


def test_consecutive_chunks_of_a_section_overlap_by_overlap_tokens() -> None:
    found = chunks(document(((), paragraphs(5, 40))), max_tokens=200, overlap_tokens=40)
    assert len(found) > 5
    assert words(found[1].text).startswith(" ".join(found[0].text.split()[-40:]))
    bodies = added(found, 40)  # (which checks every chunk's overlap)
    assert sum(len(body.split()) >= 40 for body in bodies) > 0.8 * len(bodies)  # mostly all 40 words
    no_overlap = chunks(document(((), paragraphs(5, 40))), max_tokens=200, overlap_tokens=0)
    assert " ".join(c.text for c in no_overlap).split() == " ".join(paragraphs(5, 40)).split()


def test_editing_one_paragraph_changes_only_the_chunks_around_it() -> None:
    """Cuts are placed by the text near them, not by counting from the start: an edit early in a long
    document leaves the digests of every chunk away from it as they were."""
    paras = paragraphs(6, 45)
    settings = {"max_tokens": 200, "overlap_tokens": 30}
    before = {c.digest for c in chunks(document((("Policy",), paras)), **settings)}
    assert len(before) > 20
    changed: list[int] = []
    for i in range(len(paras)):
        for edited in (paras[i].replace(" ", " new words ", 1), paras[i] + " One more sentence here."):
            after = chunks(document((("Policy",), [*paras[:i], edited, *paras[i + 1 :]])), **settings)
            changed.append(len({c.digest for c in after} - before))
    assert max(changed) <= 3
    assert sum(changed) / len(changed) < 2


def test_inserting_a_paragraph_at_the_start_keeps_the_later_chunks() -> None:
    paras = paragraphs(7, 45)
    before = chunks(document(((), paras)), max_tokens=200, overlap_tokens=30)
    after = chunks(document(((), ["A new opening paragraph.", *paras])), max_tokens=200, overlap_tokens=30)
    assert len({c.digest for c in after} - {c.digest for c in before}) <= 2
    assert [c.digest for c in after][-10:] == [c.digest for c in before][-10:]


def test_a_huge_section_without_punctuation_is_cut_between_words_fast() -> None:
    rng = random.Random(8)
    words = [rng.choice(VOCABULARY) for _ in range(20_000)]
    found = chunks(document(((), [" ".join(words)])), max_tokens=300, overlap_tokens=40)
    assert 70 < len(found) < 200
    assert max(tokens(c.text) for c in found) <= 300
    words[10_000] = "edited"
    after = chunks(document(((), [" ".join(words)])), max_tokens=300, overlap_tokens=40)
    assert len({c.digest for c in after} - {c.digest for c in found}) <= 3


def test_text_in_scripts_written_without_spaces_is_cut_too() -> None:
    text = "年次有給休暇は入社六か月後に十日付与されます。" * 40 + "\n\n" + "病気休暇は上司に連絡してください。" * 30
    found = chunks(document((("休暇",), [text])), max_tokens=100, overlap_tokens=10)
    assert len(found) > 10
    assert max(tokens(c.text) for c in found) <= 100
    assert all(c.heading == "休暇" for c in found)
    assert found[0].text.endswith("。")  # cut at a sentence's end


def test_chunks_are_the_same_in_every_process() -> None:
    """Digests are compared with those stored by an earlier process: no per-process hash seed may move a cut."""
    script = (
        "import json, random, sys\n"
        "from yao_agent.knowledge.chunk import chunks\n"
        "from yao_agent.knowledge.parse import Parsed, Section\n"
        "text = sys.stdin.read()\n"
        "print(json.dumps([c.digest for c in chunks(Parsed('t', (Section(('A',), text),)), 120, 20)]))\n"
    )
    text = "\n\n".join(paragraphs(9, 30))
    runs = [
        subprocess.run([sys.executable, "-c", script], input=text, capture_output=True, text=True, cwd=REPO,
                       env={**os.environ, "PYTHONHASHSEED": seed}, check=True, timeout=60).stdout
        for seed in ("1", "2")
    ]  # fmt: skip
    here = [c.digest for c in chunks(document((("A",), paragraphs(9, 30))), 120, 20)]
    assert json.loads(runs[0]) == json.loads(runs[1]) == here


@pytest.mark.parametrize(("max_tokens", "overlap_tokens"), [(0, 0), (100, 51), (100, -1)])
def test_chunk_sizes_that_make_no_sense_are_refused(max_tokens: int, overlap_tokens: int) -> None:
    with pytest.raises(UsageError, match=rf"max_tokens: {max_tokens}, overlap_tokens: {overlap_tokens}\)"):
        chunks(document(((), ["Text."])), max_tokens, overlap_tokens)


def test_content_hash_is_the_sha256_of_the_bytes() -> None:
    assert content_hash(b"handbook") == hashlib.sha256(b"handbook").hexdigest()
    assert content_hash(b"handbook") != content_hash(b"handbook ")
