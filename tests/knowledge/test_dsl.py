"""Knowledge in an app's files: `knowledge/<path>.yml` collections and an assistant's `search` block, each
mistake reported with its file, line and what was expected."""

from __future__ import annotations

from pathlib import Path

from tests.support.apps import errors, make_app, warnings
from yao_agent.dsl import load_app

HANDBOOK = "name: Handbook\nsources: [docs]\n"


def test_a_collection_is_found_by_its_path_and_built(tmp_path: Path) -> None:
    root = make_app(tmp_path, {
        "knowledge/handbook.yml": "name: Handbook\nsources: [docs]\nchunk: {max_tokens: 120}\n"
                                  "access: {teams: [acme]}\n",
        "knowledge/legal/contracts.yml": "name: Contracts\n",
        "knowledge/handbook/notes.yml.md": "# not a collection",
        "docs/a.md": "# A\n",
    })  # fmt: skip
    app = load_app(root)
    assert sorted(app.knowledge) == ["handbook", "legal.contracts"]
    handbook = app.knowledge["handbook"]
    assert (handbook.name, handbook.sources, handbook.chunk.max_tokens, handbook.chunk.overlap_tokens) == (
        "Handbook", ("docs",), 120, 40)  # fmt: skip
    assert handbook.access.allows("bob", "acme") and not handbook.access.allows("eve", "beta")
    assert app.knowledge["legal.contracts"].embedding is None


def test_the_search_block_is_built_with_its_defaults(tmp_path: Path) -> None:
    root = make_app(tmp_path, {
        "knowledge/handbook.yml": HANDBOOK, "docs/a.md": "x",
        "assistants/chat/assistant.yml": "name: Chat\nsearch: {knowledge: [handbook, team]}\n",
        "assistants/quiet/assistant.yml": "name: Quiet\nsearch: {knowledge: [handbook], mode: off}\n",
    })  # fmt: skip
    app = load_app(root)
    search = app.assistants["chat"].search
    assert search is not None
    assert (search.knowledge, search.mode, search.top_k, search.cite, search.web) == (("handbook", "team"), "always",
                                                                                     6, True, None)  # fmt: skip
    quiet = app.assistants["quiet"].search
    assert quiet is not None and quiet.mode == "off"  # YAML reads a bare `off` as false: it still means off
    assert app.assistants.get("chat") is not None and load_app(root).assistants["chat"].search == search


def test_an_unknown_collection_names_the_file_line_and_the_known_ones(tmp_path: Path) -> None:
    root = make_app(tmp_path, {
        "knowledge/handbook.yml": HANDBOOK, "docs/a.md": "x",
        "assistants/chat/assistant.yml": "name: Chat\nsearch:\n  knowledge: [handbok]\n",
    })  # fmt: skip
    [problem] = errors(root)
    assert problem.startswith("assistants/chat/assistant.yml:3")
    assert "unknown collection 'handbok'" in problem and "did you mean 'handbook'" in problem


def test_auto_needs_an_intent_checker_and_a_web_tool_needs_its_server(tmp_path: Path) -> None:
    root = make_app(tmp_path, {
        "knowledge/handbook.yml": HANDBOOK, "docs/a.md": "x",
        "assistants/chat/assistant.yml": "name: Chat\nsearch:\n  knowledge: [handbook]\n  mode: auto\n"
                                         "  web: {server: fetch}\n",
    })  # fmt: skip
    found = errors(root)
    assert any("mode: auto needs intent_with" in p for p in found), found
    assert any("unknown MCP server 'fetch'" in p and ":5" in p for p in found), found


def test_a_wrong_mode_or_top_k_is_a_schema_error(tmp_path: Path) -> None:
    root = make_app(tmp_path, {
        "knowledge/handbook.yml": HANDBOOK, "docs/a.md": "x",
        "assistants/chat/assistant.yml": "name: Chat\nsearch:\n  knowledge: [handbook]\n  mode: sometimes\n"
                                         "  top_k: 0\n",
    })  # fmt: skip
    found = errors(root)
    assert any(p.startswith("assistants/chat/assistant.yml:4") and "sometimes" in p for p in found), found
    assert any(p.startswith("assistants/chat/assistant.yml:5") and "top_k" in p for p in found), found


def test_sources_must_stay_inside_the_app_and_missing_ones_are_a_warning(tmp_path: Path) -> None:
    root = make_app(tmp_path / "app", {"knowledge/handbook.yml": "name: H\nsources: [../outside, docs/later]\n"})
    [problem] = errors(root)
    assert problem.startswith("knowledge/handbook.yml:2") and "outside the app folder" in problem
    fixed = make_app(tmp_path / "app", {"knowledge/handbook.yml": "name: H\nsources: [docs/later]\n"})
    assert errors(fixed) == []
    [warned] = warnings(fixed)
    assert "'docs/later' does not exist" in warned


def test_a_source_no_file_system_can_hold_is_reported_not_a_crash(tmp_path: Path) -> None:
    root = make_app(tmp_path / "app", {"knowledge/handbook.yml": 'name: H\nsources: ["docs/a\\0b.md"]\n'})
    [problem] = errors(root)
    assert problem.startswith("knowledge/handbook.yml:2") and "cannot be used as a path" in problem, problem
    long = "docs/" + "x" * 300 + ".md"
    root = make_app(tmp_path / "app", {"knowledge/handbook.yml": f"name: H\nsources: [{long}]\n"})
    assert errors(root) == [] and len(warnings(root)) == 1  # never there: nothing to index


def test_a_collections_embedding_connector_must_exist(tmp_path: Path) -> None:
    root = make_app(tmp_path, {"knowledge/handbook.yml": "name: H\nembedding: demo.embeder\n"})
    [problem] = errors(root)
    assert problem.startswith("knowledge/handbook.yml:2") and "unknown connector 'demo.embeder'" in problem


def test_a_bad_collection_file_names_what_is_expected(tmp_path: Path) -> None:
    root = make_app(tmp_path, {"knowledge/handbook.yml": "sources: docs\nchunk: {max_tokens: 5}\nextra: 1\n"})
    found = errors(root)
    assert any("name" in p and "knowledge/handbook.yml" in p for p in found), found
    assert any(p.startswith("knowledge/handbook.yml:1") and "sources" in p for p in found), found
    assert any(p.startswith("knowledge/handbook.yml:2") and "max_tokens" in p for p in found), found
    assert any(p.startswith("knowledge/handbook.yml:3") and "extra" in p for p in found), found


def test_an_overlap_larger_than_half_a_chunk_is_refused(tmp_path: Path) -> None:
    root = make_app(tmp_path, {"knowledge/handbook.yml": "name: H\nchunk:\n  max_tokens: 60\n  overlap_tokens: 40\n"})
    [problem] = errors(root)
    assert problem.startswith("knowledge/handbook.yml:4") and "expected at most 30" in problem
