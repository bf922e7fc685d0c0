"""TypeScript hooks (CONTRACT §9.6): a `.ts` file's types removed before V8 runs it, every line kept where
it was, so V8's errors and stack lines name the `.ts` file's own lines.

The transform is sucrase's `typescript` transform (yao_agent/hooks/vendor/sucrase.js, built by
scripts/build-ts-transform.sh; MIT, its licence beside it). It runs in the hook workers, never in the
server: in each worker, once, in a context of its own that no tenant's code ever shares. Each file
version is transformed once per process and remembered by its text's digest, so a warm call of a `.ts`
hook costs what a `.js` one does. A syntax error is a `HookError` naming the `.ts` file and line.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from weakref import WeakKeyDictionary

from yao_agent.base.jsonvalue import as_mapping
from yao_agent.dsl.specs import HookSource
from yao_agent.errors import HookError
from yao_agent.hooks.engine import Budget, JsEngine, ScriptFailure, ScriptTimeout
from yao_agent.hooks.procs import Worker

SUFFIX = ".ts"
STRIP_BUDGET_S = 5.0  # loading the transform (~30 ms) or transforming one file (a few ms); a bound, not a cost
STRIP_MEMORY_MB = 64  # the transform's context: a 300 KB hook needs a few MB
MAX_REMEMBERED = 1024
# Returns JSON: {"code"} or, for a syntax error, {"error", "line"} (sucrase says "(line:column)").
_ENTRY = r"""globalThis.__yao_ts = (source) => {
  try { return JSON.stringify({ code: __yao_strip(source) }); }
  catch (e) {
    const m = /\((\d+):(\d+)\)\s*$/.exec(String(e && e.message));
    return JSON.stringify({ error: String(e && e.message).replace(/\s*\(\d+:\d+\)\s*$/, ""), line: m ? +m[1] : 0 });
  }
};
"ready";"""


def is_typescript(shown: str) -> bool:
    return shown.endswith(SUFFIX)


@functools.cache
def _bundle() -> str:
    return resources.files("yao_agent.hooks").joinpath("vendor", "sucrase.js").read_text("utf-8")


class Stripper:
    """The `.ts` texts of this process, transformed in the workers; each version once."""

    def __init__(self) -> None:
        self._done: dict[str, str] = {}  # digest of the TypeScript → its JavaScript
        self._engines: WeakKeyDictionary[Worker, JsEngine] = WeakKeyDictionary()

    async def javascript(self, worker: Worker, source: HookSource, shown: str, function: str) -> str:
        """The text V8 runs for `source`: itself for a `.js` file; for a `.ts` file, its types removed."""
        if not is_typescript(shown):
            return source.text
        known = self._done.get(source.digest)
        if known is not None:
            return known
        said = as_mapping(json.loads(await self._strip(worker, source.text, shown)))
        if "error" in said:
            line = said.get("line")
            raise HookError(f"TypeScript syntax error: {said['error']}", file=shown,
                            line=line if isinstance(line, int) and line > 0 else None, function=function)  # fmt: skip
        if len(self._done) >= MAX_REMEMBERED:
            self._done.clear()
        code = str(said.get("code", ""))
        self._done[source.digest] = code
        return code

    async def _strip(self, worker: Worker, text: str, shown: str) -> str:
        engine = self._engines.get(worker)
        try:
            if engine is None or engine.broken:
                engine = JsEngine(worker)
                engine.set_memory_limit(STRIP_MEMORY_MB)
                await engine.run([_bundle(), _ENTRY], Budget(STRIP_BUDGET_S))
                self._engines[worker] = engine
            return await engine.run([f"__yao_ts({json.dumps(text)})"], Budget(STRIP_BUDGET_S))
        except (ScriptFailure, ScriptTimeout) as exc:  # the transform itself failed: a defect of ours
            self._engines.pop(worker, None)
            raise HookError(f"the TypeScript transform failed ({type(exc).__name__}: {exc})", file=shown) from None
