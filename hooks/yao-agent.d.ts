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

/** What every hook function is given first. */
interface Ctx {
  readonly chat_id: string;
  readonly assistant_id: string;
  readonly user_id: string;
  readonly team_id: string | null;
  readonly locale: string;
  readonly metadata: Record<string, Json>;
  /** A line in the server's log (and, at info and up, in `yao-agent chat`). */
  log(level: LogLevel, message: string): Promise<void>;
  /** Adds a message to the chat, streamed to the client; resolves to its id. */
  send(message: string | Message): Promise<string>;
  /** Runs another assistant as a child run and resolves to its reply. */
  call(assistantId: string, messages: string | Message[]): Promise<Message>;
  /** Searches the team's knowledge: numbered references, as the search step gives the model. */
  search(query: string, options?: SearchOptions): Promise<Reference[]>;
  memory: {
    /** This chat's value under `key` (null if none). */
    get(key: string): Promise<Json>;
    /** Keeps `value` for this chat. */
    set(key: string, value: Json): Promise<void>;
  };
}

/** The hook functions, by name: `function Create(ctx: Ctx, messages: Message[], options: Options): ...`. */
type Options = Record<string, Json>;
type Answer<T> = T | null | Promise<T | null>;
type CreateHook = (ctx: Ctx, messages: Message[], options: Options) => Answer<CreateAnswer>;
type NextHook = (ctx: Ctx, payload: NextPayload, options: Options) => Answer<NextAnswer>;
type GuardHook = (ctx: Ctx, stage: GuardStage, content: string) => GuardAnswer | Promise<GuardAnswer>;
