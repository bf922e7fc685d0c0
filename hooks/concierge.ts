// Hook of assistants/concierge, in TypeScript: its types are removed before it runs (lines kept, so errors
// name this file's lines). Runs in a V8 sandbox: no filesystem, network or process access. The types it
// uses are in yao-agent.d.ts beside it (`yao-agent hook types > hooks/yao-agent.d.ts`).

const LONG_QUESTION = 80; // characters: longer questions go to the heavy role

// Before the model: long questions go to the heavy role with a more thorough prompt.
function Create(ctx: Ctx, messages: Message[], options: Options): CreateAnswer {
  const last = messages[messages.length - 1];
  const text: string = typeof last?.content === "string" ? last.content : "";
  if (text.length > LONG_QUESTION) {
    return { connector: "use::heavy", prompt_preset: "thorough", metadata: { routed: "heavy" } };
  }
  return { metadata: { routed: "light" } };
}

// After the model: attach a small summary object the client can show (stream_end.next).
function Next(ctx: Ctx, payload: NextPayload, options: Options): NextAnswer {
  const content = payload.completion?.content;
  const reply: string = typeof content === "string" ? content : "";
  return {
    data: {
      route: ctx.metadata.routed ?? "light",
      words: reply.split(/\s+/).filter(Boolean).length,
      tools_used: payload.tools.length,
    },
  };
}
