"""TypeScript hooks and the hook author's kit: `.ts` files run in real V8 with their types removed (lines
kept, so errors name the `.ts` line), `validate` reports their syntax errors where they are written, the
typings `hook types` prints cannot drift from the API the runtime serves, and `hook run` calls a
function once without a model."""

from __future__ import annotations

import ast
import hashlib
import inspect
import json
import re
from pathlib import Path

import pytest

from tests.support import REPO
from tests.support.apps import make_app
from tests.support.cli import cli
from tests.support.runtimes import app_files, close, end_of, make_runtime, turn
from yao_agent.hooks import api
from yao_agent.hooks.bridge import RUNTIME_JS
from yao_agent.pipeline import hook_create, hostapi, next_hook
from yao_agent.store import SqlStore
from yao_agent.testing import FakeProvider, Reply

BUNDLE_SHA256 = "745841ec1239da3d436152cbdadcc2b62d157ebd7e99df8fb36a5530300af00a"  # scripts/build-ts-transform.sh
TYPED = """\
interface Said { words: number }

function Create(ctx: Ctx, messages: Message[], options: Options): CreateAnswer {
  const said: Said = { words: String(messages[0]?.content ?? "").split(" ").length };
  return { metadata: { words: said.words } as Record<string, Json> };
}

function Next(ctx: Ctx, payload: NextPayload): NextAnswer {
  const n: number = (ctx.metadata.words as number) * 10;
  if (n > 100) throw new Error(`too many words: ${n}`);
  return { data: { words: n } };
}
"""


def ts_app(root: Path, base_url: str, hook: str) -> Path:
    files = app_files(base_url)
    files["hooks/typed.ts"] = hook
    files["assistants/chat/assistant.yml"] += "hook: hooks/typed.ts\n"
    return make_app(root, files, base={})


async def test_a_typescript_hook_runs_and_its_errors_name_its_own_lines(
    tmp_path: Path, store: SqlStore, provider: FakeProvider
) -> None:
    files = app_files(provider.base_url)
    files["hooks/typed.ts"] = TYPED
    files["assistants/chat/assistant.yml"] += "hook: hooks/typed.ts\n"
    rt = make_runtime(tmp_path / "app", store, files, model=provider)
    try:
        provider.enqueue(Reply(text="ok"), Reply(text="ok"))
        end = end_of(await turn(rt, "three words here", chat_id="c1"))
        assert (end.status, end.next) == ("completed", {"words": 30})
        end = end_of(await turn(rt, " ".join(["w"] * 11), chat_id="c2"))
        assert (end.status, end.reason) == ("failed", "hook_error")
        assert end.error["file"] == "hooks/typed.ts" and end.error["line"] == 10  # the throw, where the .ts has it
        assert "too many words: 110" in end.error["message"]
    finally:
        await close(rt)


@pytest.mark.parametrize(
    ("broken", "line", "said"),
    [
        (TYPED.replace("const n: number =", "const n: number = ="), 9, "TypeScript syntax error: Unexpected token"),
        (TYPED.replace("interface Said {", "interface Said {{"), 1, "TypeScript syntax error"),
        (TYPED + "\nconst boom: number = (null as any).x;\n", 14, "TypeError: Cannot read properties of null"),
    ],
)  # fmt: skip
def test_validate_names_the_ts_file_and_line_of_a_broken_hook(
    tmp_path: Path, broken: str, line: int, said: str
) -> None:
    app = ts_app(tmp_path / "app", "http://127.0.0.1:9", broken)
    code, out = cli(app, "validate")
    assert code == 2, out
    assert f"hooks/typed.ts:{line}: {said}" in out, out


def test_the_shipped_transform_is_the_one_the_build_script_makes_with_its_licence() -> None:
    vendor = REPO / "yao_agent/hooks/vendor"
    assert hashlib.sha256((vendor / "sucrase.js").read_bytes()).hexdigest() == BUNDLE_SHA256
    assert "MIT License" in (vendor / "sucrase.LICENSE").read_text()
    assert "sucrase" in (REPO / "scripts/ts-transform/package-lock.json").read_text()


def test_the_typings_name_what_the_runtime_serves_and_what_the_hook_functions_may_answer() -> None:
    sent = set(re.findall(r'request\("(\w+)"', RUNTIME_JS))  # every ctx call the V8 runtime makes
    assert sent == {m.op for m in api.METHODS}
    typings = api.declarations()
    [built] = [n for n in ast.walk(ast.parse(inspect.getsource(hostapi.snapshot))) if isinstance(n, ast.Dict)]
    given = {key.value for key in built.keys if isinstance(key, ast.Constant)}  # what a run's ctx carries
    assert given == {name for name, _ in api.SNAPSHOT}
    assert all(f"readonly {name}:" in typings for name in given)
    create = re.search(r"interface CreateAnswer \{(.*?)\n\}", typings, re.S)
    nexts = re.search(r"interface NextAnswer \{(.*?)\n\}", typings, re.S)
    assert create is not None and nexts is not None
    assert set(re.findall(r"^  (\w+)\?:", create.group(1), re.M)) == set(hook_create.ALLOWED)
    assert set(re.findall(r"^  (\w+)\?:", nexts.group(1), re.M)) == set(next_hook.ALLOWED)
    assert (REPO / "hooks/yao-agent.d.ts").read_text() == typings  # the example app's copy is current
    code, out = cli(REPO, "hook", "types")
    assert (code, out) == (0, typings)


def test_hook_run_calls_one_function_with_a_ctx_made_from_a_file(tmp_path: Path) -> None:
    hook = tmp_path / "remember.ts"
    hook.write_text(
        "async function Create(ctx: Ctx, messages: Message[]): Promise<CreateAnswer> {\n"
        "  const seen = ((await ctx.memory.get('seen')) as number ?? 0) + 1;\n"
        "  await ctx.memory.set('seen', seen);\n"
        "  ctx.log('info', `seen ${seen} times by ${ctx.user_id}`);\n"
        "  const help = await ctx.call('helper', 'hi');\n"
        "  return { metadata: { seen, help: help.content } };\n}\n"
    )
    given = tmp_path / "input.json"
    given.write_text(
        json.dumps(
            {
                "args": [[{"role": "user", "content": "hi"}], {}],
                "ctx": {"user_id": "ann"},
                "memory": {"seen": 2},
                "calls": {"helper": {"role": "assistant", "content": "yo"}},
            }
        )
    )
    code, out = cli(REPO, "hook", "run", str(hook), "Create", "--input", str(given))
    assert code == 0, out
    said = json.loads(out)
    assert said["returned"] == {"metadata": {"seen": 3, "help": "yo"}}
    assert said["logged"] == [{"level": "info", "message": "seen 3 times by ann"}]
    assert said["memory_set"] == [{"key": "seen", "value": 3}]
    assert said["called"] == [{"assistant_id": "helper", "messages": "hi"}]

    given.write_text(json.dumps({"args": [[], {}]}))  # no reply for ctx.call: the hook's call fails, as it says
    code, out = cli(REPO, "hook", "run", str(hook), "Create", "--input", str(given))
    assert code == 1 and "no reply for ctx.call of 'helper'" in json.loads(out)["error"], out
