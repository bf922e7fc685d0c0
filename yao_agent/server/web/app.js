// The yao-agent web chat: a token, an assistant, a conversation streamed over the native API (CONTRACT §5, §6).
// Plain DOM code, no build step. Every piece of model, tool or API text is set with textContent, never as HTML.
"use strict";

(() => {
  const TOKEN_KEY = "yao-agent.token";
  const ASSISTANT_KEY = "yao-agent.assistant";
  const UNFINISHED = new Set(["failed", "cancelled", "interrupted"]);

  const $ = (id) => document.getElementById(id);
  const ui = {
    tokenForm: $("token-form"),
    token: $("token"),
    signedIn: $("signed-in"),
    signOut: $("sign-out"),
    auth: $("auth-message"),
    assistant: $("assistant"),
    chats: $("chats"),
    chatsEmpty: $("chats-empty"),
    newChat: $("new-chat"),
    chatTitle: $("chat-title"),
    status: $("status"),
    transcript: $("transcript"),
    resumeBar: $("resume-bar"),
    resumeInfo: $("resume-info"),
    resume: $("resume"),
    error: $("error"),
    errorText: $("error-text"),
    errorClose: $("error-close"),
    composer: $("composer"),
    message: $("message"),
    send: $("send"),
    stop: $("stop"),
  };

  const state = {
    token: localStorage.getItem(TOKEN_KEY) || "",
    assistants: [],
    chats: [],
    chatId: null, // the open chat; null for a new one (the server creates it on the first send)
    run: null, // the streaming run: {controller, chatId, stopping}
  };

  // ---------------------------------------------------------------- small helpers

  /** An element with a class and text (text always as a text node). */
  function h(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  const enc = encodeURIComponent;

  function textOf(content) {
    if (content === null || content === undefined) return "";
    if (typeof content === "string") return content;
    if (Array.isArray(content)) {
      return content
        .map((part) => (typeof part === "string" ? part : part && typeof part.text === "string" ? part.text : ""))
        .filter(Boolean)
        .join("\n");
    }
    return pretty(content);
  }

  /** JSON (or a JSON string) laid out for reading; anything else as text. */
  function pretty(value) {
    if (typeof value === "string") {
      try {
        return JSON.stringify(JSON.parse(value), null, 2);
      } catch {
        return value;
      }
    }
    try {
      return JSON.stringify(value, null, 2);
    } catch {
      return String(value);
    }
  }

  function when(iso) {
    const date = new Date(iso);
    return Number.isNaN(date.getTime()) ? String(iso || "") : date.toLocaleString();
  }

  function seconds(ms) {
    return `${(Number(ms || 0) / 1000).toFixed(1)} s`;
  }

  function setStatus(text, kind = "idle") {
    ui.status.textContent = text;
    ui.status.dataset.state = kind;
  }

  function scrollDown() {
    const t = ui.transcript;
    if (t.scrollHeight - t.scrollTop - t.clientHeight < 120) t.scrollTop = t.scrollHeight;
  }

  // ---------------------------------------------------------------- API

  class ApiError extends Error {
    constructor(status, type, message) {
      super(message);
      this.status = status;
      this.type = type;
    }
    describe() {
      return `${this.message} (${this.type}${this.status ? `, HTTP ${this.status}` : ""})`;
    }
  }

  function headers(extra = {}) {
    return { Authorization: `Bearer ${state.token}`, ...extra };
  }

  /** The API's `{"error": {"type", "message"}}` as an ApiError; a 401 also signs the page out. */
  async function errorOf(res) {
    let type = `http_${res.status}`;
    let message = res.statusText || "the request failed";
    try {
      const body = await res.json();
      if (body && body.error) {
        type = body.error.type || type;
        message = body.error.message || message;
      }
    } catch {
      // not JSON: keep the HTTP status line
    }
    const error = new ApiError(res.status, type, message);
    if (res.status === 401) unauthorized(error);
    return error;
  }

  async function request(method, path, body, signal) {
    const init = { method, headers: headers({ Accept: "application/json" }), signal };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    try {
      return await fetch(path, init);
    } catch (err) {
      if (err && err.name === "AbortError") throw err;
      throw new ApiError(0, "network_error", `could not reach the server: ${err && err.message}`);
    }
  }

  async function api(method, path, body) {
    const res = await request(method, path, body);
    if (!res.ok) throw await errorOf(res);
    return res.json();
  }

  /** Show an error in the banner (a 401 already has its own message by the token field). */
  function report(err) {
    if (err instanceof ApiError && err.status === 401) return;
    ui.errorText.textContent = err instanceof ApiError ? `Error: ${err.describe()}` : `Error: ${err && err.message}`;
    ui.error.hidden = false;
  }

  function clearError() {
    ui.error.hidden = true;
    ui.errorText.textContent = "";
  }

  // ---------------------------------------------------------------- token

  function showAuth(text, kind) {
    ui.auth.textContent = text;
    ui.auth.dataset.kind = kind;
    ui.auth.hidden = false;
  }

  function setSignedIn(yes) {
    ui.tokenForm.hidden = yes;
    ui.signedIn.hidden = !yes;
    ui.newChat.disabled = !yes;
    ui.send.disabled = !yes;
    if (!yes) {
      ui.assistant.replaceChildren(h("option", null, "(sign in first)"));
      ui.assistant.disabled = true;
      state.assistants = [];
      state.chats = [];
      renderChats();
    }
  }

  function forgetToken() {
    localStorage.removeItem(TOKEN_KEY);
    state.token = "";
    if (state.run) state.run.controller.abort();
    setSignedIn(false);
    ui.token.value = "";
  }

  function unauthorized(error) {
    forgetToken();
    showAuth(
      `Unauthorized: the server did not accept the token (${error.message}). Paste a valid token to continue.`,
      "error",
    );
    ui.token.focus();
  }

  async function signIn(token) {
    clearError();
    state.token = token;
    ui.auth.hidden = true;
    try {
      await loadAssistants();
    } catch (err) {
      if (!(err instanceof ApiError && err.status === 401)) {
        state.token = "";
        report(err);
      }
      return;
    }
    localStorage.setItem(TOKEN_KEY, token);
    ui.token.value = "";
    setSignedIn(true);
    await refreshChats();
    ui.message.focus();
  }

  // ---------------------------------------------------------------- assistants

  async function loadAssistants() {
    const data = await api("GET", "/api/assistants");
    state.assistants = data.assistants || [];
    const remembered = localStorage.getItem(ASSISTANT_KEY);
    ui.assistant.replaceChildren();
    if (!state.assistants.length) {
      ui.assistant.append(h("option", null, "(no assistant is visible to you)"));
      ui.assistant.disabled = true;
      return;
    }
    for (const a of state.assistants) {
      const option = h("option", null, a.name && a.name !== a.id ? `${a.name} (${a.id})` : a.id);
      option.value = a.id;
      if (a.description) option.title = a.description;
      ui.assistant.append(option);
    }
    ui.assistant.disabled = false;
    if (remembered && state.assistants.some((a) => a.id === remembered)) ui.assistant.value = remembered;
  }

  // ---------------------------------------------------------------- chats

  async function refreshChats() {
    if (!state.token) return;
    try {
      const data = await api("GET", "/api/chats");
      state.chats = data.chats || [];
    } catch (err) {
      report(err);
      return;
    }
    renderChats();
    const open = state.chats.find((c) => c.chat_id === state.chatId);
    if (open) ui.chatTitle.textContent = open.title || "Untitled chat";
  }

  function renderChats() {
    ui.chats.replaceChildren(...state.chats.map(chatItem));
    ui.chatsEmpty.hidden = state.chats.length > 0;
  }

  function chatItem(chat) {
    const item = h("li");
    const button = h("button", "chat-item");
    button.type = "button";
    button.dataset.chatId = chat.chat_id;
    button.disabled = Boolean(state.run);
    if (chat.chat_id === state.chatId) button.setAttribute("aria-current", "true");
    const meta = h("span", "chat-meta");
    meta.append(
      h("span", "chat-assistant", chat.assistant_id),
      h("span", `badge status-${chat.last_status}`, chat.last_status),
      h("time", "chat-time", when(chat.updated_at)),
    );
    meta.lastChild.dateTime = chat.updated_at || "";
    button.append(h("span", "chat-title", chat.title || "Untitled chat"), meta);
    button.addEventListener("click", () => openChat(chat.chat_id));
    item.append(button);
    return item;
  }

  function newChat() {
    if (state.run) return;
    state.chatId = null;
    ui.transcript.replaceChildren();
    ui.chatTitle.textContent = "New chat";
    ui.resumeBar.hidden = true;
    clearError();
    setStatus("Ready.");
    renderChats();
    ui.message.focus();
  }

  async function openChat(chatId) {
    if (state.run) return;
    clearError();
    state.chatId = chatId;
    const chat = state.chats.find((c) => c.chat_id === chatId);
    ui.chatTitle.textContent = (chat && chat.title) || "Untitled chat";
    if (chat && state.assistants.some((a) => a.id === chat.assistant_id)) ui.assistant.value = chat.assistant_id;
    renderChats();
    setStatus("Loading the chat…", "busy");
    try {
      const data = await api("GET", `/api/chats/${enc(chatId)}/messages`);
      renderHistory(data.messages || []);
      setStatus(chat ? `Last run: ${chat.last_status}.` : "Ready.", chat ? chat.last_status : "idle");
    } catch (err) {
      report(err);
      setStatus("Could not load the chat.", "failed");
    }
    await checkResume();
    ui.message.focus();
  }

  /** Offer "resume" when the open chat's last run did not complete. */
  async function checkResume() {
    ui.resumeBar.hidden = true;
    const chatId = state.chatId;
    if (!chatId || !state.token) return;
    const chat = state.chats.find((c) => c.chat_id === chatId);
    let point = null;
    try {
      const res = await request("GET", `/api/chats/${enc(chatId)}/resume`);
      if (res.ok) point = await res.json();
      else if (res.status !== 404) throw await errorOf(res);
    } catch (err) {
      report(err);
    }
    if (chatId !== state.chatId || state.run) return;
    if (!point && !(chat && UNFINISHED.has(chat.last_status))) return;
    const status = point ? point.status : chat.last_status;
    const parts = [`The last run of this chat ended ${status}`];
    if (point && point.reason && point.reason !== status) parts.push(` (${point.reason})`);
    if (point && point.error) parts.push(`: ${errorText(point.error)}`);
    if (point && point.steps && point.steps.length) {
      parts.push(` — unfinished: ${point.steps.map((s) => `${s.type} (${s.status})`).join(", ")}`);
    }
    parts.push(".");
    ui.resumeInfo.textContent = parts.join("");
    ui.resumeBar.hidden = false;
  }

  // ---------------------------------------------------------------- transcript rendering

  function errorText(error) {
    if (error === null || error === undefined) return "";
    if (typeof error === "string") return error;
    if (error.file) return `${error.file}${error.line ? `:${error.line}` : ""}: ${error.message || ""}`;
    return error.message || pretty(error);
  }

  function addUser(text) {
    const block = h("div", "msg user");
    block.append(h("div", "who", "You"), h("div", "bubble", text));
    ui.transcript.append(block);
    scrollDown();
  }

  /** One assistant turn: the blocks of its messages, tool cards, notices and the run's end. */
  class Turn {
    constructor(label) {
      this.node = h("div", "turn");
      this.node.append(h("div", "who", label || "Assistant"));
      ui.transcript.append(this.node);
      this.messages = new Map(); // message_id → {kind, node, body, text}
      this.cards = new Map(); // tool_call_id → card
    }

    place(node, threadId) {
      if (threadId) {
        node.classList.add("nested");
        node.prepend(h("div", "thread-label", `↳ in thread ${threadId}`));
      }
      this.node.append(node);
      scrollDown();
      return node;
    }

    // -- live events

    start(e) {
      if (this.messages.has(e.message_id)) return this.messages.get(e.message_id);
      let entry;
      if (e.kind === "tool_call") {
        entry = { kind: e.kind, card: this.card(null, e.thread_id) };
      } else if (e.kind === "reasoning") {
        const details = h("details", "reasoning");
        details.open = true;
        const body = h("div", "reasoning-text");
        details.append(h("summary", null, "Reasoning"), body);
        entry = { kind: e.kind, node: this.place(details, e.thread_id), body };
      } else {
        const node = h("div", `msg assistant kind-${e.kind}`);
        if (e.kind !== "text") node.append(h("div", "kind-label", e.kind === "error" ? "Error" : e.kind));
        const body = h("div", "bubble");
        node.append(body);
        entry = { kind: e.kind, node: this.place(node, e.thread_id), body };
      }
      entry.text = "";
      if (entry.body) {
        entry.textNode = document.createTextNode("");
        entry.body.append(entry.textNode);
      }
      this.messages.set(e.message_id, entry);
      return entry;
    }

    delta(e) {
      const entry = this.messages.get(e.message_id) || this.start(e);
      if (entry.kind === "tool_call") {
        const card = entry.card;
        if (e.tool_call_id && !card.dataset.toolCallId) this.bind(card, e.tool_call_id);
        if (e.name) card.nameNode.textContent = e.name;
        if (e.arguments) card.argsText.appendData(e.arguments);
      } else if (typeof e.text === "string") {
        entry.text += e.text;
        entry.textNode.appendData(e.text);
      }
      scrollDown();
    }

    end(e) {
      const entry = this.messages.get(e.message_id) || this.start(e);
      if (entry.kind === "tool_call") {
        const call = e.content || {};
        const card = entry.card;
        if (call.id && !card.dataset.toolCallId) this.bind(card, call.id);
        if (call.name) card.nameNode.textContent = call.name;
        if (call.arguments !== undefined) card.argsNode.textContent = pretty(call.arguments);
        if (e.status === "incomplete") card.classList.add("incomplete");
      } else {
        const full = textOf(e.content);
        if (full && full !== entry.text) entry.body.textContent = full;
        if (entry.kind === "reasoning") entry.node.open = false;
        if (e.status === "incomplete") entry.node.append(h("span", "badge status-incomplete", "incomplete"));
      }
      scrollDown();
    }

    toolResult(e) {
      const card = this.cards.get(e.tool_call_id) || this.card(e.tool_call_id, e.thread_id);
      if (!card.nameNode.textContent) card.nameNode.textContent = e.tool;
      card.serverNode.textContent = e.server ? `on ${e.server}` : "";
      const result = h("div", "tool-result");
      const label = e.error ? "Error" : "Result";
      result.append(h("div", "card-label", e.attempt > 1 ? `${label} (attempt ${e.attempt})` : label));
      result.append(h("pre", null, e.error ? e.error : pretty(e.result)));
      if (e.error) card.classList.add("failed");
      card.resultNode.replaceChildren(result);
      scrollDown();
    }

    fallback(e) {
      this.place(h("div", "notice", `Model fallback: ${e.from} → ${e.to} (${e.reason})`));
    }

    notice(text, kind = "notice") {
      this.place(h("div", kind === "error" ? "notice error" : "notice", text));
    }

    apiError(err) {
      this.place(h("div", "msg assistant kind-error api-error", `Error: ${err.describe()}`));
    }

    streamEnd(e) {
      const box = h("div", `run-end status-${e.status}`);
      box.dataset.status = e.status;
      const head = h("div", "run-end-head");
      head.append(h("span", `badge status-${e.status}`, e.status));
      if (e.reason && e.reason !== e.status) head.append(h("span", "run-reason", `reason: ${e.reason}`));
      head.append(h("span", "run-duration", seconds(e.duration_ms)));
      const usage = Object.entries(e.usage || {}).filter(([, v]) => v !== null && v !== undefined);
      if (usage.length) head.append(h("span", "run-usage", usage.map(([k, v]) => `${k.replace(/_/g, " ")} ${v}`).join(" · ")));
      box.append(head);
      if (e.error) box.append(h("div", "run-error", errorText(e.error)));
      if (e.next !== undefined && e.next !== null) {
        const details = h("details", "run-next");
        details.open = true;
        details.append(h("summary", null, "Next"), h("pre", null, pretty(e.next)));
        box.append(details);
      }
      this.place(box);
    }

    // -- tool cards

    card(toolCallId, threadId) {
      const card = h("div", "card tool-card");
      const head = h("div", "card-head");
      head.append(h("span", "card-label", "Tool call"));
      card.nameNode = h("code", "tool-name");
      card.serverNode = h("span", "tool-server");
      head.append(card.nameNode, card.serverNode);
      card.argsNode = h("pre", "tool-args");
      card.argsText = document.createTextNode("");
      card.argsNode.append(card.argsText);
      card.resultNode = h("div", "tool-result-slot");
      card.append(head, card.argsNode, card.resultNode);
      if (toolCallId) this.bind(card, toolCallId);
      return this.place(card, threadId);
    }

    bind(card, toolCallId) {
      card.dataset.toolCallId = toolCallId;
      this.cards.set(toolCallId, card);
    }

    // -- stored messages (GET /api/chats/{id}/messages)

    stored(m) {
      if (m.role === "tool") {
        this.toolResult({ tool_call_id: m.tool_call_id, tool: "", server: "", result: textOf(m.content), attempt: 1 });
        return;
      }
      const incomplete = m.status === "incomplete" ? "incomplete" : "completed";
      if (m.reasoning) {
        this.start({ message_id: `${m.message_id}:r`, kind: "reasoning", thread_id: m.thread_id });
        this.end({ message_id: `${m.message_id}:r`, kind: "reasoning", content: m.reasoning, status: incomplete });
      }
      const text = textOf(m.content);
      if (text || !(m.tool_calls && m.tool_calls.length)) {
        this.start({ message_id: m.message_id, kind: "text", thread_id: m.thread_id });
        this.end({ message_id: m.message_id, kind: "text", content: text, status: incomplete });
      }
      (m.tool_calls || []).forEach((call, i) => {
        const id = `${m.message_id}:call:${i}`;
        this.start({ message_id: id, kind: "tool_call", thread_id: m.thread_id });
        this.end({ message_id: id, kind: "tool_call", content: call, status: incomplete });
      });
    }
  }

  function renderHistory(messages) {
    ui.transcript.replaceChildren();
    let turn = null;
    let turnRun = null;
    for (const m of messages) {
      if (m.role === "user") {
        addUser(textOf(m.content));
        turn = null;
        continue;
      }
      if (!turn || m.run_id !== turnRun) {
        turn = new Turn();
        turnRun = m.run_id;
      }
      turn.stored(m);
    }
    if (!messages.length) ui.transcript.append(h("p", "muted", "This chat has no messages."));
    ui.transcript.scrollTop = ui.transcript.scrollHeight;
  }

  // ---------------------------------------------------------------- streaming

  /** The JSON of each `data:` frame of an SSE body, as it arrives. */
  async function* sseEvents(body) {
    const reader = body.getReader();
    const decoder = new TextDecoder();
    const boundary = /\r\n\r\n|\n\n|\r\r/;
    let buffer = "";
    let done = false;
    try {
      while (!done) {
        const chunk = await reader.read();
        done = chunk.done;
        buffer += done ? decoder.decode() : decoder.decode(chunk.value, { stream: true });
        let match;
        while ((match = boundary.exec(buffer)) || (done && buffer.trim())) {
          const end = match ? match.index : buffer.length;
          const frame = buffer.slice(0, end);
          buffer = buffer.slice(match ? end + match[0].length : buffer.length);
          const data = frame
            .split(/\r\n|\r|\n/)
            .filter((line) => line.startsWith("data:"))
            .map((line) => line.slice(5).replace(/^ /, ""));
          if (!data.length) continue;
          try {
            yield JSON.parse(data.join("\n"));
          } catch {
            yield { type: "_unreadable", raw: data.join("\n") };
          }
        }
      }
    } finally {
      if (!done) reader.cancel().catch(() => {});
    }
  }

  function setStreaming(on) {
    ui.send.disabled = on || !state.token;
    ui.stop.disabled = !on;
    ui.newChat.disabled = on || !state.token;
    ui.assistant.disabled = on || !state.assistants.length;
    ui.resume.disabled = on;
    for (const button of ui.chats.querySelectorAll("button")) button.disabled = on;
    ui.composer.setAttribute("aria-busy", on ? "true" : "false");
    ui.transcript.setAttribute("aria-busy", on ? "true" : "false");
  }

  function endStatus(e) {
    if (e.status === "completed") return `Completed in ${seconds(e.duration_ms)}.`;
    if (e.status === "cancelled") return `Run cancelled after ${seconds(e.duration_ms)}.`;
    const why = e.error ? `: ${errorText(e.error)}` : "";
    return `Run failed (${e.reason})${why}.`;
  }

  /** POST `path` and render the SSE run it answers with (a send, or a resume). */
  async function stream(path, body, { userText, resuming } = {}) {
    clearError();
    ui.resumeBar.hidden = true;
    if (userText !== undefined) addUser(userText);
    const turn = new Turn(resuming ? "Assistant (resumed)" : "Assistant");
    const run = { controller: new AbortController(), chatId: state.chatId, stopping: false };
    state.run = run;
    setStreaming(true);
    setStatus(resuming ? "Resuming the run…" : "Waiting for the assistant…", "busy");
    let ended = false;
    try {
      const res = await request("POST", path, body, run.controller.signal);
      if (!res.ok) {
        const err = await errorOf(res);
        if (err.status !== 401) turn.apiError(err);
        setStatus(`Request refused: ${err.message}`, "failed");
        if (userText !== undefined && !ui.message.value) ui.message.value = userText;
        return;
      }
      const headerChat = res.headers.get("X-Chat-Id");
      if (headerChat) adoptChat(run, headerChat);
      for await (const e of sseEvents(res.body)) {
        switch (e.type) {
          case "stream_start":
            adoptChat(run, e.chat_id);
            if (!run.stopping) setStatus(`Streaming from ${e.assistant_id}…`, "busy");
            break;
          case "message_start":
            turn.start(e);
            break;
          case "message_delta":
            turn.delta(e);
            break;
          case "message_end":
            turn.end(e);
            break;
          case "tool_result":
            turn.toolResult(e);
            break;
          case "fallback":
            turn.fallback(e);
            break;
          case "stream_end":
            ended = true;
            turn.streamEnd(e);
            setStatus(endStatus(e), e.status);
            break;
          case "_unreadable":
            turn.notice(`Unreadable event from the server: ${e.raw.slice(0, 200)}`, "error");
            break;
          default:
            break; // an event this page does not know yet
        }
      }
      if (!ended) {
        turn.notice("The connection closed before the run ended.", "error");
        setStatus("The connection closed before the run ended.", "failed");
      }
    } catch (err) {
      if (err && err.name === "AbortError") {
        turn.notice("Stopped.");
        setStatus("Stopped.", "cancelled");
      } else if (err instanceof ApiError) {
        turn.apiError(err);
        setStatus(`Error: ${err.message}`, "failed");
      } else {
        turn.notice(`The stream broke off: ${err && err.message}`, "error");
        setStatus("The stream broke off.", "failed");
      }
    } finally {
      state.run = null;
      setStreaming(false);
      await refreshChats();
      await checkResume();
    }
  }

  function adoptChat(run, chatId) {
    if (!chatId || run.chatId === chatId) return;
    run.chatId = chatId;
    state.chatId = chatId;
    if (run.stopping) cancelRun(run); // stop was pressed before the chat id was known
  }

  async function cancelRun(run) {
    try {
      const answer = await api("POST", `/api/chats/${enc(run.chatId)}/cancel`);
      if (answer && answer.cancelled === 0 && state.run === run) {
        // nothing was running yet (or any more): let the person try again
        run.stopping = false;
        ui.stop.disabled = false;
      }
    } catch (err) {
      if (err instanceof ApiError && err.type === "no_active_run") return;
      report(err);
      if (state.run === run) {
        run.stopping = false;
        ui.stop.disabled = false;
      }
    }
  }

  function stop() {
    const run = state.run;
    if (!run || run.stopping) return;
    run.stopping = true;
    ui.stop.disabled = true;
    setStatus("Stopping…", "busy");
    if (run.chatId) cancelRun(run);
    // else: the cancel goes out as soon as the response names the chat (adoptChat)
  }

  function send(event) {
    event.preventDefault();
    if (state.run) return;
    const text = ui.message.value.trim();
    if (!state.token) {
      showAuth("Paste an API token first.", "error");
      ui.token.focus();
      return;
    }
    if (!text) {
      ui.message.focus();
      return;
    }
    const assistant = ui.assistant.value;
    if (!assistant) {
      report(new Error("pick an assistant first"));
      return;
    }
    localStorage.setItem(ASSISTANT_KEY, assistant);
    ui.message.value = "";
    const body = { messages: [{ role: "user", content: text }] };
    if (state.chatId) body.chat_id = state.chatId;
    if (!state.chatId) ui.chatTitle.textContent = text.slice(0, 80);
    stream(`/api/assistants/${enc(assistant)}/runs`, body, { userText: text });
  }

  function resume() {
    if (state.run || !state.chatId) return;
    stream(`/api/chats/${enc(state.chatId)}/resume`, undefined, { resuming: true });
  }

  // ---------------------------------------------------------------- wiring

  ui.tokenForm.addEventListener("submit", (event) => {
    event.preventDefault();
    const token = ui.token.value.trim();
    if (!token) {
      showAuth("Paste a token first.", "error");
      ui.token.focus();
      return;
    }
    signIn(token);
  });
  ui.signOut.addEventListener("click", () => {
    forgetToken();
    newChat();
    showAuth("Signed out. Paste a token to sign in again.", "info");
    ui.token.focus();
  });
  ui.assistant.addEventListener("change", () => localStorage.setItem(ASSISTANT_KEY, ui.assistant.value));
  ui.newChat.addEventListener("click", newChat);
  ui.composer.addEventListener("submit", send);
  ui.message.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      ui.composer.requestSubmit();
    }
  });
  ui.stop.addEventListener("click", stop);
  ui.resume.addEventListener("click", resume);
  ui.errorClose.addEventListener("click", clearError);

  setSignedIn(false);
  if (state.token) {
    signIn(state.token);
  } else {
    showAuth("Paste an API token to start (create one with: yao-agent tokens create).", "info");
  }
})();
