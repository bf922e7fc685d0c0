"""`yao-agent kb` as the operator uses it: sync an app collection from its sources (again: nothing to do; a
changed file: only it; a removed file: gone; a new embedding: every chunk embedded again), add files, list,
search, delete, and a team's collection; every mistake a plain message and exit code 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.apps import make_app
from tests.support.cli import Cli

pytestmark = pytest.mark.both_stores  # what it tests is what the database does

FILES = {
    "app.yml": "roles:\n  default: demo.echo\n",
    "connectors/demo/echo.yml": "type: scripted\nrules:\n  - reply: 'echo: {{ last_user }}'\n",
    "connectors/demo/words.yml": "type: scripted\nrules:\n  - reply: x\n",  # embeds offline (hashed words)
    "connectors/demo/other.yml": "type: scripted\nrules:\n  - reply: y\n",
    "assistants/chat/assistant.yml": "name: Chat\n",
    "knowledge/handbook.yml": "name: Handbook\nsources: [docs]\nembedding: demo.words\n",
    "docs/leave.md": "# Leave\n\n## Annual leave\n\nStaff receive 25 days of paid annual leave.\n",
    "docs/expenses.md": "# Expenses\n\nThe daily meal allowance is 45 euros.\n",
    "docs/notes.bin": "not a document: ignored",
}


@pytest.fixture
def kb(tmp_path: Path, store_raw_url: str) -> Cli:
    return Cli(make_app(tmp_path / "app", FILES, base={}), store_raw_url)


def test_sync_indexes_once_and_then_only_what_changed(kb: Cli) -> None:
    code, said = kb("kb", "sync")
    assert code == 0, said
    assert said.splitlines() == ["handbook: indexed docs/expenses.md", "handbook: indexed docs/leave.md",
                                 "handbook: 2 indexed, 0 unchanged, 0 removed"]  # fmt: skip
    assert kb("kb", "sync", "handbook")[1].splitlines() == ["handbook: 0 indexed, 2 unchanged, 0 removed"]
    (kb.app / "docs/leave.md").write_text("# Leave\n\n## Annual leave\n\nStaff receive 27 days of leave.\n")
    (kb.app / "docs/expenses.md").unlink()
    assert kb("kb", "sync")[1].splitlines() == ["handbook: indexed docs/leave.md",
                                                "handbook: 1 indexed, 0 unchanged, 1 removed"]  # fmt: skip
    code, found = kb("kb", "search", "handbook", "how many days of leave", "--json")
    assert code == 0
    [first] = json.loads(found)["references"][:1]
    assert "27 days" in first["text"] and first["collection"] == "handbook"


def test_a_new_embedding_embeds_every_chunk_again_on_the_next_sync(kb: Cli) -> None:
    assert kb("kb", "sync")[0] == 0
    handbook = kb.app / "knowledge/handbook.yml"
    handbook.write_text(handbook.read_text().replace("demo.words", "demo.other"))
    code, said = kb("kb", "sync")
    assert code == 0 and said.splitlines()[-1] == "handbook: 0 indexed, 2 unchanged, 0 removed, 2 re-embedded"
    code, listed = kb("kb", "list")
    assert code == 0 and listed.split("\t")[:2] == ["handbook", "Handbook"] and "demo.other" in listed


def test_files_are_added_listed_searched_and_deleted(kb: Cli, tmp_path: Path) -> None:
    note = tmp_path / "parking.md"
    note.write_text("# Parking\n\nParking is on level 2, bays 200 to 260.\n")
    code, said = kb("kb", "add", "handbook", str(note), "--meta", "dept=facilities", "--title", "Parking guide")
    assert code == 0 and "parking.md → doc_" in said and "1 chunks, 1 embedded" in said
    assert "(unchanged)" in kb("kb", "add", "handbook", str(note), "--meta", "dept=facilities",
                               "--title", "Parking guide")[1]  # fmt: skip
    code, docs = kb("kb", "docs", "handbook")
    [row] = docs.splitlines()
    document, title, chunks, source, meta = row.split("\t")
    assert (title, chunks, source, meta) == ("Parking guide", "1 chunks", "upload:parking.md", "dept=facilities")
    code, found = kb("kb", "search", "handbook", "where to park", "--filter", "dept=facilities")
    assert code == 0 and found.startswith("[1] Parking guide › Parking") and "bays 200 to 260" in found
    assert kb("kb", "search", "handbook", "where to park", "--filter", "dept=hr")[1] == "nothing found\n"
    assert kb("kb", "rm", "handbook", document) == (0, f"deleted {document} from handbook\n")
    assert kb("kb", "docs", "handbook")[1] == "collection handbook has no documents\n"


def test_a_teams_collection_is_made_and_used_by_its_id(kb: Cli, tmp_path: Path) -> None:
    assert kb("kb", "create", "policies", "--team", "acme") == (0, "created acme:policies (full text only)\n")
    note = tmp_path / "policy.txt"
    note.write_text("Travel\n\nBook trains for trips under four hours.\n")
    assert kb("kb", "add", "acme:policies", str(note))[0] == 0
    listed = kb("kb", "list", "--team", "acme")[1]
    assert "acme:policies\tpolicies\t1 documents, 1 chunks\tfull text only" in listed
    assert "acme:policies" not in kb("kb", "list")[1]  # a team's collections show only when it is named
    assert "trains" in kb("kb", "search", "acme:policies", "train trips")[1]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("kb", "sync", "nope"), "no app collection 'nope' (known: handbook)"),
        (("kb", "add", "handbook", "missing.md"), "missing.md: no such file"),
        (("kb", "docs", "acme:nothing"), "no collection 'acme:nothing'"),
        (("kb", "rm", "handbook", "doc_404"), "no document 'doc_404' in collection 'handbook'"),
        (("kb", "create", "bad name", "--team", "acme"), "invalid collection name 'bad name'"),
        (("kb", "search", "handbook", "x", "--filter", "novalue"), "'novalue': expected key=value"),
    ],
)
def test_mistakes_are_a_plain_message_and_exit_2(kb: Cli, args: tuple[str, ...], said: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    code, out = kb(*args)
    assert code == 2, out
    assert said in out + capsys.readouterr().err
