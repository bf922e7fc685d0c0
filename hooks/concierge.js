// Hook of assistants/concierge. Runs in a V8 sandbox: no filesystem, network or process access.

// Before the model: long questions go to the heavy role with a more thorough prompt.
function Create(ctx, messages, options) {
  const last = messages[messages.length - 1];
  const text = typeof last?.content === "string" ? last.content : "";
  if (text.length > 80) {
    return { connector: "use::heavy", prompt_preset: "thorough", metadata: { routed: "heavy" } };
  }
  return { metadata: { routed: "light" } };
}

// After the model: attach a small summary object the client can show (stream_end.next).
function Next(ctx, payload, options) {
  const reply = payload.completion?.content ?? "";
  return {
    data: {
      route: ctx.metadata.routed ?? "light",
      words: reply.split(/\s+/).filter(Boolean).length,
      tools_used: payload.tools.length,
    },
  };
}
