"""One error tree for the whole package.

::

    YaoAgentError
    ├── SpecError            the app's YAML is wrong; carries every Problem found in one pass
    ├── UsageError           a command or call was used wrongly (unknown id, bad option, no identity)
    │   ├── NotFound         no such chat / assistant / resume point in the caller's scope
    │   ├── PermissionDenied the caller may not do this (fail closed)
    │   ├── ChatBusy         `on_busy: reject` found the chat busy (HTTP 409)
    │   ├── NoActiveRun      an append found no run to join (HTTP 409)
    │   ├── ApprovalConflict approvals decided already, or still to decide before a resume (HTTP 409)
    │   ├── Conflict         what was to be created exists already (a team's knowledge collection; HTTP 409)
    │   └── RegexRefused     a pattern RE2 cannot run in linear time (backreferences, lookaround), or no pattern
    ├── Refused              a run may not start now; not the caller's mistake (HTTP 429; CLI exit 1)
    │   ├── BudgetExceeded   the team's or user's spend reached a budget in its current window
    │   └── RateLimited      the team or user started too many runs, or used too many tokens, this minute
    ├── TokenExpired         an API token past its expiry (HTTP 401, code `token_expired`)
    ├── CannotListen         `serve` cannot listen on its address
    ├── EnvVarMissing        a `$ENV.NAME` value was used while NAME is unset
    ├── HistoryUnavailable   a chat's history could not be read (the run goes on without it)
    └── RunError             a run ended badly; `reason` is its terminal reason
        ├── ModelError       the model call failed; `kind` says how and `retryable` whether to try again
        ├── ToolError        a tool could not be run (server unreachable, unknown tool, retries exhausted)
        ├── HookError        a JS hook threw, timed out or ran out of memory; carries file and line
        ├── DelegateError    delegation failed (unknown assistant, depth limit, cycle)
        ├── RenderError      a prompt or scripted template failed while rendering
        │   └── PromptError  a prompt template did (terminal reason `prompt_error`); carries file and line
        ├── MaxTurns         the run used `limits.max_turns` model calls
        ├── RunTimeout       the run took longer than `limits.timeout_s`
        ├── LoopDetected     the same tool calls with the same results, again and again
        ├── ContextOverflow  a request does not fit the model's window, even after compaction
        ├── OutputError      the final answer did not fit the output schema after its retries
        └── OverBudget       a model call would take a team's or user's spend past a budget: it is not made

Messages never contain secret values: errors name variables and files, never what they hold.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from yao_agent.vocabulary import ModelErrorKind, TerminalReason


class Exit(IntEnum):
    """The `yao-agent` command's exit codes, here once (the CLI reference lists them from this)."""

    OK = 0  # done
    FAILED = 1  # a run failed, or the command could not do what it was asked (a missing $ENV value, a store down)
    USAGE = 2  # what was asked is wrong: bad arguments, an app that does not validate, no such chat
    INTERRUPTED = 130  # Ctrl-C


class YaoAgentError(Exception):
    """Base of every error this package raises on purpose."""


@dataclass(frozen=True, slots=True)
class Problem:
    """One mistake in an app's files, located precisely enough to jump to it."""

    file: str
    line: int
    path: str
    message: str
    warning: bool = False

    def __str__(self) -> str:
        if self.line <= 0:  # about a file or folder as a whole, not a place inside it
            return f"{self.file}: {self.message}"
        if not self.path:  # about the file's text, such as a YAML syntax error
            return f"{self.file}:{self.line}: {self.message}"
        return f"{self.file}:{self.line} {self.path}: {self.message}"


class SpecError(YaoAgentError):
    """The app's files are invalid. `problems` holds all of them, in file order."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        count = len(problems)
        head = f"{count} problem{'s' if count != 1 else ''} in the app"
        super().__init__(head + "\n" + "\n".join(str(p) for p in problems))


class UsageError(YaoAgentError):
    """A command or library call was used wrongly; the message says how to do it right."""


class NotFound(UsageError):
    """The thing asked for does not exist in the caller's scope."""


class PermissionDenied(UsageError):
    """The caller's identity may not do this."""


class EnvVarMissing(YaoAgentError):
    """A `$ENV.NAME` value was needed but NAME is not set. Names the variable and who asked."""

    def __init__(self, name: str, origin: str) -> None:
        self.name = name
        self.origin = origin
        super().__init__(f"environment variable {name} is not set (needed by {origin})")


class HistoryUnavailable(YaoAgentError):
    """Reading a chat's history failed; nothing was written. The run may go on without history."""


class RunError(YaoAgentError):
    """A run ended without completing. `reason` is one of the terminal reasons."""

    reason: TerminalReason = "internal_error"

    def __init__(self, message: str, *, reason: TerminalReason | None = None) -> None:
        super().__init__(message)
        if reason is not None:
            self.reason = reason

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


class ModelError(RunError):
    """The model call failed.

    `kind` is one of: auth, bad_request, context_overflow, rate_limit, server, timeout,
    connection, incomplete, config. `retryable` errors may be tried again or fall back to
    the next connector, but only before the first token arrived.
    """

    reason = "model_error"

    def __init__(
        self,
        message: str,
        *,
        kind: ModelErrorKind,
        retryable: bool = False,
        status: int | None = None,
        connector: str = "",
        partial: str = "",
    ) -> None:
        super().__init__(message, reason="context_overflow" if kind == "context_overflow" else "model_error")
        self.kind: ModelErrorKind = kind
        self.retryable = retryable
        self.status = status
        self.connector = connector
        self.partial = partial


class ToolError(RunError):
    reason = "tool_error"


class HookError(RunError):
    """A hook failed. `file` and `line` point into the hook's source."""

    reason = "hook_error"

    def __init__(self, message: str, *, file: str, line: int | None = None, function: str = "") -> None:
        super().__init__(message)
        self.file = file
        self.line = line
        self.function = function

    def detail(self) -> dict[str, object]:
        return {"file": self.file, "line": self.line, "message": self.message}


class DelegateError(RunError):
    reason = "delegate_error"


class RenderError(RunError):
    """A template that passed the load-time check failed while rendering."""


class PromptError(RenderError):
    """A prompt template failed or ran past its bounds while rendering: the author's mistake, at `file:line`
    of the YAML that holds it (never an internal error)."""

    reason = "prompt_error"

    def __init__(self, message: str, *, file: str, line: int | None = None) -> None:
        super().__init__(message)
        self.file = file
        self.line = line

    def detail(self) -> dict[str, object]:
        return {"file": self.file, "line": self.line, "message": self.message}


class MaxTurns(RunError):
    reason = "max_turns"


class RunTimeout(RunError):
    reason = "timeout"


class LoopDetected(RunError):
    reason = "loop_detected"


class OutputError(RunError):
    """The run's final answer is not JSON valid against its output schema, also after `output.retries`
    corrections (or the run ended with no answer to check)."""

    reason = "output_error"


class ContextOverflow(RunError):
    """A request does not fit the model's context window, even after its earlier turns were summarised."""

    reason = "context_overflow"


class OverBudget(RunError):
    """Before a model call, the scope's spend so far plus what its calls in flight may still cost is at or
    over a budget: the call is not made and the run ends `budget_exceeded` (resumable once the budget
    allows). Never caught on the way: not by a hook's `ctx.call`, not by a delegation. `resets_at`: when
    the window whose budget was reached starts again (Unix seconds)."""

    reason = "budget_exceeded"

    def __init__(self, message: str, *, resets_at: float) -> None:
        super().__init__(message)
        self.resets_at = resets_at


class GuardrailBlocked(RunError):
    """A guardrail check blocked what a stage was passing on (CONTRACT §9.5): the input, the answer, a tool
    call's arguments or its result. `stage` and `check` say which; the message never quotes the text."""

    reason = "guardrail"

    def __init__(self, message: str, *, stage: str, check: str) -> None:
        super().__init__(message)
        self.stage, self.check = stage, check


class ChatBusy(UsageError):
    """A request with `on_busy: reject` found the chat busy (HTTP 409)."""


class NoActiveRun(UsageError):
    """Append found no active run for the chat (HTTP 409)."""


class ApprovalConflict(UsageError):
    """The chat's approvals were decided already (by someone else, or by a new message), or a resume was
    asked for while some still wait for a decision (HTTP 409)."""


class Conflict(UsageError):
    """What was to be created exists already, such as a team's knowledge collection of that name (HTTP 409)."""


class RegexRefused(UsageError):
    """A pattern that cannot run in linear time, or is no pattern (safe_regex); `str()` says why."""


class Refused(YaoAgentError):
    """A run may not start now (stage 1): nothing is created. `retry_after` says when to try again, in
    seconds, when that is known."""

    code = "refused"

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class BudgetExceeded(Refused):
    code = "budget_exceeded"


class RateLimited(Refused):
    code = "rate_limited"


class Draining(Refused):
    """The server is shutting down: it finishes its runs but starts none (HTTP 503; another server may)."""

    code = "draining"


class Forbidden(PermissionDenied):
    """The caller is known but may not do this: a team-wide change or view by a member (HTTP 403)."""


class TokenExpired(YaoAgentError):
    """An API token that was valid until `expires_at` (epoch seconds): the caller needs a new one."""

    def __init__(self, expires_at: float) -> None:
        super().__init__("token expired")
        self.expires_at = expires_at


class CannotListen(YaoAgentError):
    """The address cannot be listened on: taken, not this host's, or not allowed."""
