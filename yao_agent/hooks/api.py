"""What a hook may use of `ctx`, and what its functions are given and may answer, declared once: the host's
table of `ctx` calls (host.py) is made from it, and `yao-agent hook types` prints it as TypeScript
declarations for editors (`.d.ts`). tests/hooks/test_typescript.py checks it against the runtime's own
calls (bridge.py) and the snapshot a run gives (pipeline/hostapi.py), so the typings cannot drift.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Method:
    op: str  # its name on the wire between the hook's runtime and the host
    path: str  # as the hook writes it after `ctx.`
    signature: str  # TypeScript
    doc: str


METHODS: tuple[Method, ...] = (
    Method("log", "log", "(level: LogLevel, message: string): Promise<void>",
           "A line in the server's log (and, at info and up, in `yao-agent chat`)."),
    Method("send", "send", "(message: string | Message): Promise<string>",
           "Adds a message to the chat, streamed to the client; resolves to its id."),
    Method("mget", "memory.get", "(key: string): Promise<Json>", "This chat's value under `key` (null if none)."),
    Method("mset", "memory.set", "(key: string, value: Json): Promise<void>", "Keeps `value` for this chat."),
    Method("call", "call", "(assistantId: string, messages: string | Message[]): Promise<Message>",
           "Runs another assistant as a child run and resolves to its reply."),
    Method("search", "search", "(query: string, options?: SearchOptions): Promise<Reference[]>",
           "Searches the team's knowledge: numbered references, as the search step gives the model."),
)  # fmt: skip

# The read-only facts every call's `ctx` carries, as a run gives them (pipeline/hostapi.py `snapshot`).
SNAPSHOT: tuple[tuple[str, str], ...] = (
    ("chat_id", "string"),
    ("assistant_id", "string"),
    ("user_id", "string"),
    ("team_id", "string | null"),
    ("locale", "string"),
    ("metadata", "Record<string, Json>"),
)

_TYPES = """\
// What yao-agent gives a hook, and what it may answer: `yao-agent hook types > hooks/yao-agent.d.ts`.
// A hook file is a script, not a module: its Create, Next and Guard are found by name.

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
type LogLevel = "debug" | "info" | "warn" | "error";

interface Message {
  role: "system" | "user" | "assistant" | "tool";
  content: string | null | Array<{ type: string; [key: string]: Json }>;
  tool_calls?: Array<{ id: string; type: "function"; function: { name: string; arguments: string } }>;
  tool_call_id?: string;
}

interface SearchOptions { knowledge?: string[]; top_k?: number; filter?: Record<string, string> }

interface Reference {
  n: number; collection: string; document_id: string; title: string; heading?: string; text: string;
  score: number; source: "kb" | "web"; url?: string; metadata?: Record<string, Json>;
}

/** What Create may change for the run (every key optional; null: nothing; any other key is an error). */
interface CreateAnswer {
  messages?: Message[];
  connector?: string;
  prompt_preset?: string;
  temperature?: number;
  max_tokens?: number;
  max_completion_tokens?: number;
  top_p?: number;
  metadata?: Record<string, Json>;
  locale?: string;
  mcp_servers?: Array<string | { server: string; tools?: string[]; approve?: string | string[] }>;
  disable_global_prompts?: boolean;
  delegate?: string | { assistant_id: string; messages?: Message[] };
  require_approval?: string[];
  search?: boolean | { knowledge?: string[]; top_k?: number };
}

/** What Next is given: the conversation before the reply, the reply, and the tool calls it made. */
interface NextPayload {
  messages: Message[];
  completion: Message;
  tools: Array<{ tool_call_id: string; server: string; tool: string; arguments: string; result: Json;
                 error: string | null }>;
}

/** What Next may decide, at most one of stop, delegate, continue (null: the tool loop decides). */
interface NextAnswer {
  data?: Json;
  stop?: boolean;
  delegate?: string | { assistant_id: string; messages?: Message[] };
  continue?: { messages?: Message[] };
}

type GuardStage = "input" | "output" | "tool_input" | "tool_output";

/** What a guardrail's Guard decides about one text. */
interface GuardAnswer { action: "allow" | "mask" | "block"; content?: string; reason?: string }
"""

_FUNCTIONS = """
/** The hook functions, by name: `function Create(ctx: Ctx, messages: Message[], options: Options): ...`. */
type Options = Record<string, Json>;
type Answer<T> = T | null | Promise<T | null>;
type CreateHook = (ctx: Ctx, messages: Message[], options: Options) => Answer<CreateAnswer>;
type NextHook = (ctx: Ctx, payload: NextPayload, options: Options) => Answer<NextAnswer>;
type GuardHook = (ctx: Ctx, stage: GuardStage, content: string) => GuardAnswer | Promise<GuardAnswer>;
"""


def host_names() -> dict[str, str]:
    """Each wire op as a hook writes it (`mget` → `ctx.memory.get`): what errors and logs name."""
    return {m.op: f"ctx.{m.path}" for m in METHODS}


def declarations() -> str:
    """The `.d.ts` of the hook API."""
    lines = [_TYPES, "/** What every hook function is given first. */", "interface Ctx {"]
    lines += [f"  readonly {name}: {kind};" for name, kind in SNAPSHOT]
    top = [m for m in METHODS if "." not in m.path]
    for method in top:
        lines += [f"  /** {method.doc} */", f"  {method.path}{method.signature};"]
    nested = [m for m in METHODS if "." in m.path]
    lines.append("  memory: {")
    for method in nested:
        lines += [f"    /** {method.doc} */", f"    {method.path.split('.', 1)[1]}{method.signature};"]
    lines += ["  };", "}", _FUNCTIONS]
    return "\n".join(lines)
