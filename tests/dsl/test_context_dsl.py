"""An assistant's `context` block (CONTRACT §3.3): its defaults, its values, and its mistakes named."""

from __future__ import annotations

from pathlib import Path

from tests.support.apps import errors, make_app, warnings
from yao_agent.dsl import load_app
from yao_agent.dsl.specs import ContextSettings


def test_no_context_block_means_the_contracts_defaults(tmp_path: Path) -> None:
    make_app(tmp_path, {})
    context = load_app(tmp_path).assistant("chat").context
    assert context == ContextSettings()
    assert (context.max_input_tokens, context.reserve_output_tokens, context.tool_result_max_tokens) == (
        None,
        1024,
        4000,
    )
    assert (context.compact_at, context.keep_recent_turns, context.summarize_with) == (0.8, 4, None)


def test_every_setting_is_read(tmp_path: Path) -> None:
    make_app(tmp_path, {"assistants/chat/assistant.yml": """\
        name: Chat
        context:
          max_input_tokens: 16000
          reserve_output_tokens: 2000
          tool_result_max_tokens: 500
          compact_at: 0.5
          keep_recent_turns: 2
          summarize_with: demo.echo
        """})  # fmt: skip
    context = load_app(tmp_path).assistant("chat").context
    assert context == ContextSettings(16000, 2000, 500, 0.5, 2, "demo.echo")


def test_mistakes_are_named_with_their_line(tmp_path: Path) -> None:
    make_app(tmp_path, {"assistants/chat/assistant.yml": """\
        name: Chat
        context:
          max_input_tokens: 1000
          compact_at: 1.5
          keep_recent_turns: 0
          summarize_with: demo.ecko
          window: 3
        """})  # fmt: skip
    assert errors(tmp_path) == [
        "assistants/chat/assistant.yml:3 context.max_input_tokens: 1000 leaves no room for a request "
        "(expected more than reserve_output_tokens, 1024)",
        "assistants/chat/assistant.yml:4 context.compact_at: 1.5 is too large (expected at most 1)",
        "assistants/chat/assistant.yml:5 context.keep_recent_turns: 0 is too small (expected at least 1)",
        "assistants/chat/assistant.yml:6 context.summarize_with: unknown connector 'demo.ecko' "
        "(did you mean 'demo.echo'? known: demo.echo)",
        "assistants/chat/assistant.yml:7 context.window: unknown key 'window' (expected one of: max_input_tokens, "
        "reserve_output_tokens, tool_result_max_tokens, compact_at, keep_recent_turns, summarize_with)",
    ]


def test_a_summariser_role_app_yml_does_not_define_is_a_warning(tmp_path: Path) -> None:
    make_app(tmp_path, {"assistants/chat/assistant.yml": "name: Chat\ncontext: {summarize_with: 'use::cheap'}\n"})
    assert errors(tmp_path) == []
    [warning] = warnings(tmp_path)
    assert warning.startswith("assistants/chat/assistant.yml:2 context.summarize_with: role 'cheap' is not defined")
