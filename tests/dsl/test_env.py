"""`$ENV.NAME` is resolved when a value is used, names what is missing, and never shows a secret."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.apps import make_app
from yao_agent.dsl import load_app
from yao_agent.dsl.envvars import EnvValue, resolve_env
from yao_agent.errors import EnvVarMissing

CONNECTOR = "type: openai\nmodel: gpt-4o-mini\napi_key: $ENV.TEST_OPENAI_KEY\nbase_url: $ENV.TEST_BASE/v1\n"


def test_missing_variables_do_not_fail_the_load(tmp_path: Path) -> None:
    make_app(tmp_path, {"connectors/openai/mini.yml": CONNECTOR})
    app = load_app(tmp_path)  # no TEST_OPENAI_KEY in the environment, and that is fine until it is used
    assert app.connectors["openai.mini"].api_key is not None


def test_a_missing_variable_names_itself_and_the_file_that_asked(tmp_path: Path) -> None:
    make_app(tmp_path, {"connectors/openai/mini.yml": CONNECTOR})
    key = load_app(tmp_path).connectors["openai.mini"].api_key
    assert key is not None
    with pytest.raises(EnvVarMissing) as caught:
        key.resolve({})
    assert str(caught.value) == (
        "environment variable TEST_OPENAI_KEY is not set (needed by connectors/openai/mini.yml:3 api_key)"
    )


def test_an_empty_variable_counts_as_missing() -> None:
    with pytest.raises(EnvVarMissing, match="EMPTY_ONE"):
        resolve_env("$ENV.EMPTY_ONE", "here", {"EMPTY_ONE": ""})


def test_substitution_inside_a_string(tmp_path: Path) -> None:
    make_app(tmp_path, {"connectors/openai/mini.yml": CONNECTOR})
    base = load_app(tmp_path).connectors["openai.mini"].base_url
    assert base is not None
    assert base.resolve({"TEST_BASE": "http://127.0.0.1:9"}) == "http://127.0.0.1:9/v1"


def test_secrets_never_show_in_repr_str_or_errors(tmp_path: Path) -> None:
    make_app(tmp_path, {"connectors/openai/mini.yml": CONNECTOR})
    app = load_app(tmp_path)
    key = app.connectors["openai.mini"].api_key
    assert key is not None
    secret = "sk-very-secret-value"
    assert key.resolve({"TEST_OPENAI_KEY": secret}) == secret
    shown = repr(app) + str(app.connectors) + repr(key) + str(key)
    assert secret not in shown
    assert "$ENV.TEST_OPENAI_KEY" in shown
    literal = EnvValue("sk-written-in-yaml", "connectors/x.yml:3 api_key", secret=True)
    assert "sk-written-in-yaml" not in repr(literal) + str(literal)
    with pytest.raises(EnvVarMissing) as caught:
        resolve_env("$ENV.A-$ENV.B", "x.yml:1 k", {"A": secret})
    assert secret not in str(caught.value)
