"""The loader names every mistake with file, line, YAML path and what was expected — all in one pass."""

from __future__ import annotations

import os
import warnings as warnings_module
from pathlib import Path

import pytest

from tests.support.apps import errors, make_app, warnings
from yao_agent.dsl import check_app, load_app
from yao_agent.errors import SpecError, UsageError


def test_minimal_app_loads_with_ids_from_paths(tmp_path: Path) -> None:
    make_app(tmp_path, {"assistants/support/triage/assistant.yml": "name: Triage\nconnector: demo.echo\n"})
    app = load_app(tmp_path)
    assert sorted(app.assistants) == ["chat", "support.triage"]
    assert list(app.connectors) == ["demo.echo"]
    assert app.assistants["support.triage"].connector == "demo.echo"
    assert app.assistants["chat"].connector == "use::default"
    assert app.config.roles == {"default": ("demo.echo",)}


def test_malformed_yaml_names_the_line(tmp_path: Path) -> None:
    make_app(
        tmp_path, {"assistants/chat/assistant.yml": "name: Chat\nprompts:\n  - role: system\n    content: [oops\n"}
    )
    [error] = errors(tmp_path)
    assert error.startswith("assistants/chat/assistant.yml:4: malformed YAML")


def test_wrong_type_names_path_line_and_expected(tmp_path: Path) -> None:
    make_app(tmp_path, {"app.yml": "roles:\n  default: demo.echo\nlimits:\n  max_turns: lots\n"})
    assert errors(tmp_path) == ["app.yml:4 limits.max_turns: wrong type: got string (expected integer)"]


def test_missing_required_key(tmp_path: Path) -> None:
    make_app(tmp_path, {"assistants/chat/assistant.yml": "description: no name here\n"})
    assert errors(tmp_path) == ["assistants/chat/assistant.yml:1 (root): missing required key 'name' (expected string)"]


def test_unknown_key_is_an_error_with_a_suggestion(tmp_path: Path) -> None:
    make_app(tmp_path, {"assistants/chat/assistant.yml": "name: Chat\nconector: demo.echo\n"})
    [error] = errors(tmp_path)
    assert error.startswith(
        "assistants/chat/assistant.yml:2 conector: unknown key 'conector' (did you mean 'connector'?"
    )


def test_duplicate_key(tmp_path: Path) -> None:
    make_app(tmp_path, {"assistants/chat/assistant.yml": "name: Chat\ndescription: a\nname: Other\n"})
    assert errors(tmp_path) == ["assistants/chat/assistant.yml:3 name: duplicate key 'name' (first set on line 1)"]


def test_duplicate_connector_ids(tmp_path: Path) -> None:
    make_app(tmp_path, {"connectors/demo.echo.yml": "type: scripted\nrules: [{reply: hi}]\n"})
    [error] = errors(tmp_path)
    assert (
        error
        == "connectors/demo/echo.yml: duplicate connector id 'demo.echo' (also defined by connectors/demo.echo.yml)"
    )


def test_two_assistant_variants_in_one_folder(tmp_path: Path) -> None:
    make_app(tmp_path, {"assistants/chat/assistant.yaml": "name: Chat too\n"})
    assert errors(tmp_path) == [
        "assistants/chat/assistant.yml: two variants: assistant.yaml and assistant.yml (expected one)"
    ]


def test_unknown_connector_names_known_ids(tmp_path: Path) -> None:
    make_app(tmp_path, {"assistants/chat/assistant.yml": "name: Chat\n\nconnector: demo.ecko\n"})
    assert errors(tmp_path) == [
        "assistants/chat/assistant.yml:3 connector: unknown connector 'demo.ecko' "
        "(did you mean 'demo.echo'? known: demo.echo)"
    ]


def test_unknown_connector_in_a_fallback_list(tmp_path: Path) -> None:
    make_app(tmp_path, {"app.yml": "roles:\n  default: demo.echo\n  light:\n    - demo.echo\n    - openai.mini\n"})
    assert errors(tmp_path) == ["app.yml:5 roles.light[1]: unknown connector 'openai.mini' (known: demo.echo)"]


def test_role_not_in_app_yml_is_a_warning_not_an_error(tmp_path: Path) -> None:
    make_app(tmp_path, {"assistants/chat/assistant.yml": "name: Chat\nconnector: use::heavy\n"})
    report = check_app(tmp_path)
    assert report.errors == []
    assert report.app is not None
    assert [str(w) for w in report.warnings] == [
        "assistants/chat/assistant.yml:2 connector: role 'heavy' is not defined in app.yml: "
        "runs use role 'default' unless a team or user role setting defines it"
    ]


def test_unknown_mcp_server_as_in_the_contract(tmp_path: Path) -> None:
    make_app(
        tmp_path,
        {
            "mcps/weather.yml": "command: python\nargs: [w.py]\n",
            "mcps/files.yml": "command: python\n",
            "assistants/weather/assistant.yml": """\
                name: Weather
                mcp:
                  servers:
                    - weather
                    - wether
            """,
        },
    )
    assert errors(tmp_path) == [
        "assistants/weather/assistant.yml:5 mcp.servers[1]: unknown MCP server 'wether' "
        "(did you mean 'weather'? known: files, weather)"
    ]


def test_tool_filter_must_name_a_known_server(tmp_path: Path) -> None:
    make_app(
        tmp_path,
        {
            "mcps/weather.yml": "command: python\n",
            "assistants/chat/assistant.yml": "name: Chat\nmcp:\n  servers:\n    - {server: nope, tools: [forecast]}\n",
        },
    )
    assert errors(tmp_path) == [
        "assistants/chat/assistant.yml:4 mcp.servers[0]: unknown MCP server 'nope' (known: weather)"
    ]


def test_tool_filter_entries_must_be_unique(tmp_path: Path) -> None:
    make_app(
        tmp_path,
        {
            "mcps/weather.yml": "command: python\n",
            "assistants/chat/assistant.yml": "name: Chat\nmcp:\n  servers:\n    - server: weather\n"
            "      tools:\n        - forecast\n        - forecast\n",
        },
    )
    assert errors(tmp_path) == [
        "assistants/chat/assistant.yml:7 mcp.servers[0].tools[1]: duplicate item 'forecast' (expected each item once)"
    ]


def test_missing_hook_file_lists_the_hooks_there_are(tmp_path: Path) -> None:
    make_app(
        tmp_path,
        {
            "hooks/real.js": "function Create() { return null }\n",
            "assistants/chat/assistant.yml": "name: Chat\nhook: hooks/rael.js\n",
        },
    )
    assert errors(tmp_path) == [
        "assistants/chat/assistant.yml:2 hook: hook file not found: hooks/rael.js (known: hooks/real.js)"
    ]


def test_hook_file_outside_the_app_is_refused(tmp_path: Path) -> None:
    (tmp_path / "outside.js").write_text("function Create() {}\n")
    app = make_app(tmp_path / "app", {"assistants/chat/assistant.yml": "name: Chat\nhook: ../outside.js\n"})
    assert errors(app) == [
        "assistants/chat/assistant.yml:2 hook: hook file '../outside.js' is outside the app "
        "(expected a path under the app)"
    ]


def test_hook_naming_an_unknown_preset_or_connector_warns_at_its_line(tmp_path: Path) -> None:
    make_app(
        tmp_path,
        {
            "hooks/h.js": "function Create(ctx) {\n  return {prompt_preset: 'frendly', connector: 'demo.eco'};\n}\n",
            "assistants/chat/assistant.yml": """\
                name: Chat
                hook: hooks/h.js
                prompt_presets:
                  friendly: [{role: system, content: be nice}]
            """,
        },
    )
    assert warnings(tmp_path) == [
        "hooks/h.js:2: unknown prompt preset 'frendly' (did you mean 'friendly'? known: friendly)",
        "hooks/h.js:2: unknown connector 'demo.eco' (did you mean 'demo.echo'? known: demo.echo)",
    ]


def test_template_syntax_error_points_at_the_line_inside_a_block(tmp_path: Path) -> None:
    make_app(
        tmp_path,
        {
            "assistants/chat/assistant.yml": """\
                name: Chat
                prompts:
                  - role: system
                    content: |
                      You are {{ assistant.name }}.
                      Today is {{ now.year }.
            """
        },
    )
    [error] = errors(tmp_path)
    assert error.startswith("assistants/chat/assistant.yml:6 prompts[0].content: template syntax error:")


def test_unknown_template_variable_is_a_load_error(tmp_path: Path) -> None:
    make_app(
        tmp_path,
        {
            "assistants/chat/assistant.yml": "name: Chat\nprompt_presets:\n  terse:\n"
            "    - {role: system, content: 'Hi {{ usr }}'}\n"
        },
    )
    assert errors(tmp_path) == [
        "assistants/chat/assistant.yml:4 prompt_presets.terse[0].content: unknown template variable 'usr' "
        "(expected one of: assistant, chat_id, locale, metadata, now, team_id, user_id)"
    ]


def test_scripted_rules_are_checked(tmp_path: Path) -> None:
    make_app(
        tmp_path,
        {
            "connectors/demo/echo.yml": """\
                type: scripted
                rules:
                  - match: {user: "(unclosed"}
                    reply: x
                  - match: {role: tool}
                  - reply: "{{ nope }}"
            """
        },
    )
    found = errors(tmp_path)
    assert found[0].startswith("connectors/demo/echo.yml:3 rules[0].match.user: invalid regular expression:")
    assert found[1:] == [
        "connectors/demo/echo.yml:5 rules[1]: rule gives no answer (expected one of: reply, tool_calls, error)",
        "connectors/demo/echo.yml:6 rules[2].reply: unknown template variable 'nope' "
        "(expected one of: last_message, last_user, match, messages, now, tool_results)",
    ]


@pytest.mark.parametrize(("pattern", "said"), [("[a--z]", "Possible set difference"), ("x[[]", "Possible nested set")])
def test_a_pattern_python_warns_about_is_a_located_problem(tmp_path: Path, pattern: str, said: str) -> None:
    """Python warns (FutureWarning) of a character class a later version may read as a set operation: the
    author gets the file and line, not Python's warning on the terminal (the fuzzer found `[a--z]`)."""
    make_app(tmp_path, {"connectors/demo/echo.yml": f"type: scripted\nrules:\n  - match: {{user: '{pattern}'}}\n"
                                                     "    reply: x\n"})  # fmt: skip
    with warnings_module.catch_warnings():
        warnings_module.simplefilter("ignore")  # as a user's process has it, not the tests' "error": ours decides
        found = errors(tmp_path)
    assert len(found) == 1 and found[0].startswith(
        f"connectors/demo/echo.yml:3 rules[0].match.user: invalid regular expression: {said} at position"
    ), found
    assert found[0].endswith("(a later Python may read it otherwise: escape the character) (expected a Python regex)")


def test_model_connector_needs_a_model_and_no_rules(tmp_path: Path) -> None:
    make_app(tmp_path, {"connectors/openai/mini.yml": "type: openai\nrules: [{reply: x}]\n"})
    assert errors(tmp_path) == [
        "connectors/openai/mini.yml:1 (root): missing required key 'model' "
        "(expected string; a model connector names its model)",
        "connectors/openai/mini.yml:2 rules: 'rules' is only used by type: scripted (this connector is type: openai)",
    ]


def test_http_mcp_server_needs_a_url(tmp_path: Path) -> None:
    make_app(tmp_path, {"mcps/remote.yml": "transport: http\ncommand: python\n"})
    assert errors(tmp_path) == [
        "mcps/remote.yml:1 (root): missing required key 'url' (expected string; an http server needs its url)",
        "mcps/remote.yml:2 command: 'command' does not apply to transport: http",
    ]


def test_every_mistake_of_every_file_in_one_pass(tmp_path: Path) -> None:
    make_app(
        tmp_path,
        {
            "app.yml": "roles:\n  default: demo.nope\nhistory_size: -1\n",
            "assistants/chat/assistant.yml": "name: 3\nconnector: nope\n",
            "assistants/other/assistant.yml": "name: Other\ncolour: red\n",
            "connectors/bad.yml": "type: openai\nmodel: [a]\n",
        },
    )
    assert errors(tmp_path) == [
        "app.yml:2 roles.default: unknown connector 'demo.nope' (did you mean 'demo.echo'? known: bad, demo.echo)",
        "app.yml:3 history_size: -1 is too small (expected at least 0)",
        "assistants/chat/assistant.yml:1 name: wrong type: got integer (expected string)",
        "assistants/chat/assistant.yml:2 connector: unknown connector 'nope' (known: bad, demo.echo)",
        "assistants/other/assistant.yml:2 colour: unknown key 'colour' (expected one of: name, description, "
        "connector, prompts, prompt_presets, disable_global_prompts, options, hook, hook_policy, mcp, search, access, "
        "on_busy, context, output, guardrails)",
        "connectors/bad.yml:2 model: wrong type: got list (expected string)",
    ]


def test_load_app_raises_one_spec_error_with_all_problems(tmp_path: Path) -> None:
    make_app(tmp_path, {"assistants/a/assistant.yml": "{}\n", "assistants/b/assistant.yml": "name: [x]\n"})
    with pytest.raises(SpecError) as caught:
        load_app(tmp_path)
    assert [p.file for p in caught.value.problems] == ["assistants/a/assistant.yml", "assistants/b/assistant.yml"]
    assert "2 problems in the app" in str(caught.value)


def test_file_that_is_not_utf8_names_the_line(tmp_path: Path) -> None:
    make_app(tmp_path, {"assistants/chat/assistant.yml": b"name: Chat\ndescription: caf\xe9\n"})
    assert errors(tmp_path) == [
        "assistants/chat/assistant.yml:2: file is not valid UTF-8 (byte 0xe9; expected UTF-8 text)"
    ]


def test_empty_file(tmp_path: Path) -> None:
    make_app(
        tmp_path,
        {"connectors/demo/echo.yml": "", "assistants/chat/assistant.yml": "name: Chat\nconnector: demo.echo\n"},
    )
    assert errors(tmp_path) == [
        "connectors/demo/echo.yml:1: file is empty (expected a mapping describing the connector)"
    ]


def test_empty_app_yml_means_defaults(tmp_path: Path) -> None:
    make_app(
        tmp_path, {"app.yml": "# nothing yet\n", "assistants/chat/assistant.yml": "name: Chat\nconnector: demo.echo\n"}
    )
    app = load_app(tmp_path)
    assert app.config.history_size == 20
    assert app.config.limits.max_tool_retries == 3


def test_two_yaml_documents_in_one_file(tmp_path: Path) -> None:
    make_app(tmp_path, {"assistants/chat/assistant.yml": "name: Chat\n---\nname: Again\n"})
    assert errors(tmp_path) == ["assistants/chat/assistant.yml:3: more than one YAML document (expected exactly one)"]


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")
def test_symlink_loop_is_reported_not_followed_forever(tmp_path: Path) -> None:
    make_app(tmp_path, {})
    (tmp_path / "assistants" / "chat" / "again").symlink_to(tmp_path / "assistants")
    [error] = errors(tmp_path)
    assert error == "assistants/chat/again: symlink loop: this folder is reached twice (expected a tree)"


def test_ids_must_be_names(tmp_path: Path) -> None:
    make_app(tmp_path, {"assistants/my chat/assistant.yml": "name: Spaces\n"})
    assert errors(tmp_path) == [
        "assistants/my chat/assistant.yml: 'my chat' cannot be part of an id "
        "(expected letters, digits, '_' and '-', starting with a letter or digit)"
    ]


def test_mcp_ids_that_collide_as_tool_prefixes(tmp_path: Path) -> None:
    make_app(tmp_path, {"mcps/git.hub.yml": "command: a\n", "mcps/git_hub.yml": "command: b\n"})
    assert errors(tmp_path) == [
        "mcps/git_hub.yml: MCP server id 'git_hub' gives its tools the prefix 'git_hub__' as 'git.hub' does "
        "(expected distinct ids)"
    ]


def test_a_folder_that_is_not_an_app_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no app at"):
        check_app(tmp_path)


def test_yaml_tags_and_merge_keys_are_refused_cleanly(tmp_path: Path) -> None:
    make_app(tmp_path, {"assistants/chat/assistant.yml": "name: !!python/name:os.system\nbase: &b {x: 1}\n<<: *b\n"})
    found = errors(tmp_path)
    assert found[0].startswith("assistants/chat/assistant.yml:1 name: unsupported YAML value")
    assert "assistants/chat/assistant.yml:3 (root): YAML merge keys (<<) are not supported" in found


def test_specs_carry_every_setting(tmp_path: Path) -> None:
    make_app(
        tmp_path,
        {
            "mcps/weather.yml": "command: python\nargs: [w.py]\nenv: {KEY: $ENV.WEATHER_KEY}\ntimeout_s: 5\n",
            "hooks/h.js": "function Create() { return null }\n",
            "assistants/chat/assistant.yml": """\
                name: Chat
                connector: use::light
                hook: hooks/h.js
                hook_policy: {timeout_ms: 250, on_error: ignore}
                mcp: {servers: [{server: weather, tools: [forecast]}], tool_loop: false, max_turns: 2}
                access: {teams: [acme]}
                options: {temperature: 0.5}
            """,
        },
    )
    spec = load_app(tmp_path).assistants["chat"]
    assert spec.hook_path == tmp_path / "hooks/h.js"
    assert (spec.hook_policy.timeout_ms, spec.hook_policy.memory_mb, spec.hook_policy.on_error) == (250, 64, "ignore")
    assert [(u.server, u.tools) for u in spec.mcp.servers] == [("weather", ("forecast",))]
    assert (spec.mcp.tool_loop, spec.mcp.max_turns) == (False, 2)
    assert spec.access.allows("u1", "acme") and not spec.access.allows("u1", None)
    assert spec.options == {"temperature": 0.5}


def test_approve_lists_tools_of_the_entry_or_all(tmp_path: Path) -> None:
    make_app(
        tmp_path,
        {
            "mcps/files.yml": "command: python\n",
            "mcps/bank.yml": "command: python\n",
            "assistants/chat/assistant.yml": """\
                name: Chat
                mcp:
                  servers:
                    - {server: files, tools: [read_file, write_file], approve: [write_file]}
                    - {server: bank, approve: all}
            """,
        },
    )
    spec = load_app(tmp_path).assistants["chat"]
    files, bank = spec.mcp.servers
    assert files.approve == ("write_file",) and files.needs_approval("write_file")
    assert not files.needs_approval("read_file")
    assert bank.needs_approval("pay") and bank.needs_approval("refund")


def test_a_tool_to_approve_must_be_offered_and_approve_must_be_a_list_or_all(tmp_path: Path) -> None:
    make_app(
        tmp_path,
        {
            "mcps/files.yml": "command: python\n",
            "assistants/chat/assistant.yml": """\
                name: Chat
                mcp:
                  servers:
                    - {server: files, tools: [read_file], approve: [write_file]}
            """,
            "assistants/other/assistant.yml": "name: Other\nmcp: {servers: [{server: files, approve: some}]}\n",
        },
    )
    found = errors(tmp_path)
    assert found[0] == (
        "assistants/chat/assistant.yml:4 mcp.servers[0].approve[0]: 'write_file' is not among this entry's tools "
        "(read_file); a tool to approve must be offered"
    )
    assert found[1].startswith("assistants/other/assistant.yml:2 mcp.servers[0]")
    assert len(found) == 2
