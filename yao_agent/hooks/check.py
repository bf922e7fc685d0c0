"""Loading a hook text as a run would, without calling it: what `yao-agent validate` reports about hooks,
and what holds a hook that does not load back from a server's reload.

The file goes through the runs' own loading (a fresh context in a worker process, the runtime, then the
file as its own script, within the assistant's time and memory limits), so validate accepts exactly
what loads at run time and reports it with V8's own line and message: a syntax error, a throw at top
level, a top level that never ends or that V8 cannot survive. What the file defines is checked as a run
would use it.
"""

from __future__ import annotations

from yao_agent.dsl.specs import HookPolicy, HookSource
from yao_agent.errors import HookError, Problem
from yao_agent.hooks import errors
from yao_agent.hooks.bridge import FUNCTIONS
from yao_agent.hooks.leases import Workers
from yao_agent.hooks.pool import Loads
from yao_agent.hooks.procs import WorkerLost

# A top level that runs longer than this is stopped at validate, even if the assistant allows more:
# validate must stay quick, and a hook's load is seldom more than a few milliseconds.
LOAD_LIMIT_MS = 5000
_EXPECTED = "function Create(ctx, messages, options) or function Next(ctx, payload, options)"


async def check_hook_source(text: str, shown: str, policy: HookPolicy) -> list[Problem]:
    """Every problem a run would meet loading this hook text (`shown` as the assistant names its file)."""
    limited = HookPolicy(timeout_ms=min(policy.timeout_ms, LOAD_LIMIT_MS), memory_mb=policy.memory_mb)
    function = FUNCTIONS[0]  # which function a run would be calling only shows in a run's error
    workers = Workers(1)
    try:
        engine = await Loads().load(await workers.acquire("check", "check"), HookSource.of(text), shown, function,
                                    limited)  # fmt: skip
        kinds = dict(engine.kinds)
    except HookError as exc:
        return [_load_problem(exc, shown, policy, limited)]
    except WorkerLost as exc:
        return [Problem(shown, 0, "", f"the hook runtime could not be started to check it: {exc.detail}")]
    finally:
        await workers.aclose()
    return defined_problems(shown, kinds)


def _load_problem(exc: HookError, shown: str, policy: HookPolicy, limited: HookPolicy) -> Problem:
    if exc.message != errors.timed_out(limited.timeout_ms, file=shown, function="").message:
        return Problem(shown, exc.line or 0, "", exc.message)
    if limited.timeout_ms < policy.timeout_ms:
        message = (
            f"its top level was still running after {limited.timeout_ms} ms and was stopped, so it was not "
            f"checked (runs allow it {policy.timeout_ms} ms)"
        )
        return Problem(shown, 0, "", message, warning=True)
    message = (
        f"{exc.message} while loading: its top level did not finish within hook_policy.timeout_ms, "
        "so every run would fail (expected a top level that finishes quickly)"
    )
    return Problem(shown, 0, "", message)


def defined_problems(shown: str, kinds: dict[str, str]) -> list[Problem]:
    """What the file defines, judged as a run uses it (`kinds`: `typeof` each hook function)."""
    wrong = [
        Problem(shown, 0, "", f"{name} is defined but is not a function (it is a {kind})")
        for name, kind in kinds.items()
        if kind not in ("function", "undefined")
    ]
    if wrong or any(kind == "function" for kind in kinds.values()):
        return wrong
    message = f"defines neither Create nor Next, so the hook does nothing (expected {_EXPECTED})"
    return [Problem(shown, 0, "", message, warning=True)]
