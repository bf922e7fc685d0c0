// The yao-agent web chat: a token, an assistant, a conversation streamed over the native API (CONTRACT §5, §6).
// Plain DOM code, no build step. Every piece of model, tool or API text is set with textContent, never as HTML,
// except the assistant's replies, which are rendered as sanitised markdown (markdown.js).
"use strict";

(() => {
  const TOKEN_KEY = "yao-agent.token";
  const ASSISTANT_KEY = "yao-agent.assistant";
  const OPEN_KEY = "yao-agent.open-chat"; // per tab: a reload opens the chat again
  const CUT_KEY = "yao-agent.cut-runs"; // per tab: the chats whose answers the page was streaming as it unloaded
  // Read once, before this page writes its own: what the page before a reload had open and was streaming.
  const reopen = { chat: sessionStorage.getItem(OPEN_KEY), cut: new Set(JSON.parse(sessionStorage.getItem(CUT_KEY) || "[]")) };
  sessionStorage.removeItem(CUT_KEY);
  const UNFINISHED = new Set(["failed", "cancelled", "interrupted"]);
  const { h, messageActions, addCodeCopies, sseEvents, Versions, Attachments } = window.yaoParts;
  const md = window.yaoMarkdown; // null without the vendor files: replies then show as plain text

  // Why a run did not complete (its terminal reason), in words for the person chatting. The technical
  // message stays folded away under "details", with the run id an operator looks it up by.
  const REASONS = {
    model_error: "The model could not be reached or refused the request.",
    timeout: "The answer took too long and was stopped.",
    tool_error: "A tool the assistant needed did not work.",
    hook_error: "The assistant's script failed.",
    prompt_error: "The assistant's instructions could not be prepared.",
    delegate_error: "Another assistant this one relies on could not answer.",
    context_overflow: "This conversation has grown too long for the model. Start a new chat to go on.",
    output_error: "The model's answer did not have the expected form.",
    max_turns: "The assistant took too many steps and was stopped before it finished.",
    loop_detected: "The assistant kept repeating the same step, so it was stopped.",
    internal_error: "Something went wrong on the server.",
    cancelled: "Stopped before the answer was finished.",
    approval_required: "The assistant is waiting for someone to approve a tool it wants to use.",
    client_tools: "The assistant is waiting for the client to run a tool it brought.",
    budget_exceeded: "The spending budget was reached, so the assistant stopped. It can go on once the budget allows.",
  };
  // The same, short, for "This answer was interrupted (…)".
  const CAUSES = {
    model_error: "the model could not be reached",
    timeout: "it took too long",
    tool_error: "a tool the assistant needed did not work",
    hook_error: "the assistant's script failed",
    prompt_error: "the assistant's instructions could not be prepared",
    delegate_error: "another assistant could not answer",
    context_overflow: "the conversation is too long for the model",
    output_error: "the answer did not have the expected form",
    max_turns: "it took too many steps",
    loop_detected: "it kept repeating the same step",
    internal_error: "something went wrong on the server",
    budget_exceeded: "the spending budget was reached",
  };

  const $ = (id) => document.getElementById(id);
  const ui = {
    tokenForm: $("token-form"),
    token: $("token"),
    oidcSignIn: $("oidc-sign-in"),
    signedInLabel: $("signed-in-label"),
    signedIn: $("signed-in"),
    signOut: $("sign-out"),
    auth: $("auth-message"),
    assistant: $("assistant"),
    chats: $("chats"),
    chatsEmpty: $("chats-empty"),
    search: $("chat-search"),
    newChat: $("new-chat"),
    chatTitle: $("chat-title"),
    chatActions: $("chat-actions"),
    renameChat: $("rename-chat"),
    deleteChat: $("delete-chat"),
    renameForm: $("rename-form"),
    renameInput: $("rename-input"),
    renameCancel: $("rename-cancel"),
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
    oidc: false, // whether the server signs pages in with an identity provider (GET /auth/session)
    session: null, // that sign-in's session (user, team, CSRF token), when this browser has one
    assistants: [],
    chats: [],
    query: "", // the search box's text: the chat list shows what the server finds for it
    listed: 0, // the number of the latest chat-list request (an older answer arriving late is dropped)
    get chatId() {
      return this.pane ? this.pane.chatId : null; // the open chat; null for a new one (named on its first send)
    },
    title: "", // the open chat's title
    pane: null, // the open chat's Pane (what the transcript shows)
    panes: new Map(), // chat id → Pane of every chat whose run this page streams, open or not
  };

  /** A chat as the page shows it: its transcript, kept while the person looks at another chat so that a
   *  run streaming into it goes on; the run (`{controller, stopping}`), and the panel of calls it waits on. */
  class Pane {
    constructor(chatId) {
      this.chatId = chatId; // null until the server names a new chat
      this.node = h("div", "pane");
      this.run = null;
      this.approvals = null;
      this.follow = 0; // the timer of a run this page did not start (another tab, before a reload)
    }

    get visible() {
      return state.pane === this;
    }
  }

  // ---------------------------------------------------------------- small helpers

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

  /** Keep the newest text in view, when the person is at the bottom of the pane and looking at it. */
  function scrollDown(pane = state.pane) {
    if (pane && !pane.visible) return;
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
  }

  // Signed in with the identity provider, the session cookie authenticates (the browser sends it) and
  // every request carries the session's CSRF token, which the server asks of writes; else the pasted token.
  function headers(extra = {}) {
    if (state.session) return { "X-CSRF-Token": state.session.csrf, ...extra };
    return { Authorization: `Bearer ${state.token}`, ...extra };
  }

  /** Whether the page has a way in: a pasted token, or a session with the identity provider. */
  function authed() {
    return Boolean(state.token || state.session);
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
    if (body instanceof FormData) {
      init.body = body; // a file upload: the browser writes the multipart Content-Type with its boundary
    } else if (body !== undefined) {
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

  /** An API error for people: our 4xx messages are written for them; a server fault or no server is not theirs. */
  function plainError(err) {
    if (!(err instanceof ApiError)) return (err && err.message) || "Something went wrong.";
    if (err.status === 0) return "The server could not be reached. Check the connection and try again.";
    if (err.status >= 500) return "Something went wrong on the server. Try again in a moment.";
    return err.message;
  }

  /** Show an error in the banner (a 401 already has its own message by the token field). */
  function report(err) {
    if (err instanceof ApiError && err.status === 401) return;
    ui.errorText.textContent = plainError(err);
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
    ui.tokenForm.hidden = yes || state.oidc;
    ui.oidcSignIn.hidden = yes || !state.oidc;
    ui.signedIn.hidden = !yes;
    ui.signedInLabel.textContent = state.session ? `Signed in as ${state.session.user_id}` : "Signed in with a token";
    // usage.js opens its panel only for a signed-in page, and closes it (and forgets what it showed) here.
    document.dispatchEvent(new CustomEvent("yao-agent:session", { detail: { signedIn: yes } }));
    ui.search.disabled = !yes;
    if (!yes) {
      ui.assistant.replaceChildren(h("option", null, "(sign in first)"));
      ui.assistant.disabled = true;
      state.assistants = [];
      state.chats = [];
      state.query = "";
      ui.search.value = "";
      renderChats();
    }
    syncControls();
  }

  function forgetToken() {
    localStorage.removeItem(TOKEN_KEY);
    state.token = "";
    state.session = null;
    for (const pane of state.panes.values()) stopFollowing(pane);
    for (const pane of state.panes.values()) if (pane.run) pane.run.controller.abort();
    state.panes.clear();
    setSignedIn(false);
    ui.token.value = "";
  }

  function unauthorized(error) {
    forgetToken();
    if (state.oidc) {
      showAuth(`Signed out: ${error.message}. Sign in again to continue.`, "error");
      return;
    }
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
    if (token) localStorage.setItem(TOKEN_KEY, token);
    ui.token.value = "";
    setSignedIn(true);
    await refreshChats();
    await reopenAfterReload();
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
    if (!authed()) return;
    const number = ++state.listed;
    const query = state.query.trim();
    let found;
    try {
      found = await api("GET", query ? `/api/chats?q=${enc(query)}` : "/api/chats");
    } catch (err) {
      report(err);
      return;
    }
    if (number !== state.listed) return; // a newer search has been sent meanwhile
    state.chats = found.chats || [];
    renderChats();
    const open = state.chats.find((c) => c.chat_id === state.chatId);
    if (open) showTitle(open.title);
  }

  function renderChats() {
    ui.chats.replaceChildren(...state.chats.map(chatItem));
    ui.chatsEmpty.hidden = state.chats.length > 0;
    ui.chatsEmpty.textContent = state.query.trim() ? `No chats match “${state.query.trim()}”.` : "No chats yet.";
  }

  let searchTimer = 0;
  function searchChats() {
    state.query = ui.search.value;
    clearTimeout(searchTimer);
    searchTimer = setTimeout(refreshChats, 200); // one request once the person pauses typing
  }

  /** The open chat's title in the heading; the rename and delete buttons go with an open chat. */
  function showTitle(title) {
    state.title = title || "";
    ui.chatTitle.textContent = state.title || (state.chatId ? "Untitled chat" : "New chat");
    ui.chatActions.hidden = !state.chatId || !ui.renameForm.hidden;
  }

  function chatItem(chat) {
    const item = h("li");
    const button = h("button", "chat-item");
    button.type = "button";
    button.dataset.chatId = chat.chat_id;
    if (chat.chat_id === state.chatId) button.setAttribute("aria-current", "true");
    const pane = state.panes.get(chat.chat_id);
    const status = pane && pane.run ? "running" : chat.last_status; // the list may predate the run
    button.dataset.status = status;
    const meta = h("span", "chat-meta");
    meta.append(
      h("span", "chat-assistant", chat.assistant_id),
      h("span", `badge status-${status}`, status === "running" ? "answering…" : status),
      h("time", "chat-time", when(chat.updated_at)),
    );
    meta.lastChild.dateTime = chat.updated_at || "";
    button.append(h("span", "chat-title", chat.title || "Untitled chat"), meta);
    button.addEventListener("click", () => openChat(chat.chat_id));
    item.append(button);
    return item;
  }

  /** Show `pane` in the transcript; a pane with nothing streaming is let go once another is shown. */
  function showPane(pane) {
    const previous = state.pane;
    if (previous && previous !== pane && !previous.run && !previous.follow && previous.chatId) {
      state.panes.delete(previous.chatId);
    }
    state.pane = pane;
    sessionStorage.setItem(OPEN_KEY, pane.chatId || "");
    if (pane.chatId) state.panes.set(pane.chatId, pane);
    ui.transcript.replaceChildren(pane.node);
    ui.transcript.scrollTop = ui.transcript.scrollHeight;
    syncControls();
  }

  function newChat() {
    stopRenaming();
    showPane(new Pane(null));
    showTitle("");
    ui.resumeBar.hidden = true;
    clearError();
    setStatus("Ready.");
    renderChats();
    ui.message.focus();
  }

  async function openChat(chatId) {
    clearError();
    stopRenaming();
    const chat = state.chats.find((c) => c.chat_id === chatId);
    if (chat && state.assistants.some((a) => a.id === chat.assistant_id)) ui.assistant.value = chat.assistant_id;
    const live = state.panes.get(chatId);
    if (live && live.run) {
      // Its run streams here: the pane has everything so far and goes on filling.
      showPane(live);
      showTitle(chat && chat.title);
      renderChats();
      ui.resumeBar.hidden = true;
      setStatus(live.run.stopping ? "Stopping…" : "Streaming…", "busy");
      ui.message.focus();
      return;
    }
    const pane = live || new Pane(chatId);
    showPane(pane);
    showTitle(chat && chat.title);
    renderChats();
    await loadPane(pane, chat);
  }

  /** Fill `pane` from the chat's stored history, then offer what its last run left to do. */
  async function loadPane(pane, chat) {
    if (pane.visible) setStatus("Loading the chat…", "busy");
    try {
      const data = await api("GET", `/api/chats/${enc(pane.chatId)}/messages?versions=true`);
      if (pane.run) return; // a run started meanwhile: it shows itself
      renderHistory(data.messages || [], pane);
      if (pane.visible) setStatus(chat ? `Last run: ${chat.last_status}.` : "Ready.", chat ? chat.last_status : "idle");
    } catch (err) {
      if (!pane.visible) return;
      report(err);
      setStatus("Could not load the chat.", "failed");
      return;
    }
    if (chat && chat.last_status === "running") {
      followRun(pane); // started before this page loaded, or in another tab: shown as it is stored
      return;
    }
    if (resumeCut(pane, chat && chat.last_status) || !pane.visible) return;
    await checkResume();
    if (!(await checkApprovals())) ui.message.focus();
  }

  /** A run this page did not start (the page was reloaded, another tab sent it): the stored chat is read
   *  again every second until the run ends; the answer grows a step at a time, not a word at a time. */
  function followRun(pane) {
    stopFollowing(pane);
    if (pane.visible) setStatus("Still answering: this answer was started before the page was opened…", "busy");
    pane.follow = setInterval(async () => {
      if (!state.panes.has(pane.chatId) && !pane.visible) return stopFollowing(pane);
      let found;
      try {
        const chats = await api("GET", "/api/chats");
        found = (chats.chats || []).find((c) => c.chat_id === pane.chatId);
        const data = await api("GET", `/api/chats/${enc(pane.chatId)}/messages?versions=true`);
        if (pane.run) return stopFollowing(pane);
        renderHistory(data.messages || [], pane);
      } catch (err) {
        return; // the next tick tries again; a 401 has signed the page out and cleared the timer
      }
      if (found && found.last_status === "running") return;
      stopFollowing(pane);
      if (resumeCut(pane, found && found.last_status) || !pane.visible) return;
      setStatus(found ? `Last run: ${found.last_status}.` : "Ready.", found ? found.last_status : "idle");
      await refreshChats();
      await checkResume();
      await checkApprovals();
    }, 1000);
    syncControls();
  }

  function stopFollowing(pane) {
    if (!pane.follow) return;
    clearInterval(pane.follow);
    pane.follow = 0;
    if (pane.visible) syncControls();
  }

  /** After a reload: the chat that was open is opened again, and the answers the reload cut off (leaving a
   *  stream stops its run, CONTRACT §5) are resumed where they stopped, the open one on screen. */
  async function reopenAfterReload() {
    const known = (id) => state.chats.find((c) => c.chat_id === id);
    const open = reopen.chat && known(reopen.chat);
    reopen.chat = null;
    for (const chatId of reopen.cut) {
      const chat = known(chatId);
      if (!chat) reopen.cut.delete(chatId);
      else if (chatId !== (open && open.chat_id)) {
        const pane = new Pane(chatId);
        state.panes.set(chatId, pane); // kept while its run is followed or resumed
        loadPane(pane, chat);
      }
    }
    if (open) await openChat(open.chat_id);
    else ui.message.focus();
  }

  /** A run ended that this page did not stream (its status read from the chat list): when it is one the last
   *  reload cut off, it is resumed now. Returns whether it was. */
  function resumeCut(pane, status) {
    if (!reopen.cut.has(pane.chatId)) return false;
    reopen.cut.delete(pane.chatId);
    if (status !== "cancelled") return false;
    state.panes.set(pane.chatId, pane);
    stream(`/api/chats/${enc(pane.chatId)}/resume`, undefined, { resuming: true, pane });
    return true;
  }

  /** Offer "resume" when the open chat's last run did not complete. */
  async function checkResume() {
    ui.resumeBar.hidden = true;
    const chatId = state.chatId;
    if (!chatId || !authed()) return;
    const chat = state.chats.find((c) => c.chat_id === chatId);
    let point = null;
    try {
      const res = await request("GET", `/api/chats/${enc(chatId)}/resume`);
      if (res.ok) point = await res.json();
      else if (res.status !== 404) throw await errorOf(res);
    } catch (err) {
      report(err);
    }
    if (chatId !== state.chatId || state.pane.run) return;
    if (!point && !(chat && UNFINISHED.has(chat.last_status))) return;
    const [text, action] = resumeWording(point ? point.status : chat.last_status, point && point.reason);
    ui.resumeInfo.textContent = text;
    ui.resume.textContent = action;
    ui.resumeBar.hidden = false;
  }

  /** [what the bar says, what its button says] for a run that did not complete. */
  function resumeWording(status, reason) {
    if (status === "cancelled") return ["This answer was stopped before it was finished.", "Continue"];
    if (status === "interrupted") {
      return ["This answer was interrupted (the server stopped before it was finished).", "Try again"];
    }
    const cause = CAUSES[reason];
    return [cause ? `This answer was interrupted (${cause}).` : "This answer was interrupted.", "Try again"];
  }

  // ---------------------------------------------------------------- transcript rendering

  function errorText(error) {
    if (error === null || error === undefined) return "";
    if (typeof error === "string") return error;
    if (error.file) return `${error.file}${error.line ? `:${error.line}` : ""}: ${error.message || ""}`;
    return error.message || pretty(error);
  }

  /** A person's message: its text, the images it carried, and what can be done with it (copy, edit). */
  function addUser(content, pane, parent = pane.node, messageId = null) {
    const block = h("div", "msg user");
    const bubble = h("div", "bubble", textOf(content));
    for (const url of imagesOf(content)) {
      const image = h("img", "attached-image");
      image.src = url;
      image.alt = "an attached image";
      bubble.append(image);
    }
    block.append(h("div", "who", "You"), bubble);
    if (messageId) block.dataset.messageId = messageId;
    block.append(messageActions(() => textOf(content), editAction(block, content, pane)));
    parent.append(block);
    scrollDown(pane);
    return block;
  }

  /** The data: URLs of a message's image parts (the page only ever sends images as data: URLs). */
  function imagesOf(content) {
    if (!Array.isArray(content)) return [];
    return content
      .filter((part) => part && part.type === "image_url" && part.image_url)
      .map((part) => (typeof part.image_url === "string" ? part.image_url : part.image_url.url))
      .filter((url) => typeof url === "string" && url.startsWith("data:image/"));
  }

  // ---------------------------------------------------------------- copy, edit, regenerate

  /** The person's messages of the current version (not an earlier one, not one the server refused). */
  function currentUsers(pane) {
    return [...pane.node.querySelectorAll(".msg.user")].filter((b) => !b.closest(".version.earlier") && !b.classList.contains("unsent"));
  }

  /** A message's stored id: known when it came from the history, looked up for one sent from this page. */
  async function messageIdOf(block, pane) {
    if (block.dataset.messageId) return block.dataset.messageId;
    const data = await api("GET", `/api/chats/${enc(pane.chatId)}/messages`);
    const stored = (data.messages || []).filter((m) => m.role === "user");
    currentUsers(pane).forEach((b, i) => {
      if (stored[i] && !b.dataset.messageId) b.dataset.messageId = stored[i].message_id;
    });
    return block.dataset.messageId || null;
  }

  /** What follows `node` in its container: the answers that a regenerate or an edit makes an earlier version. */
  function following(node) {
    const nodes = [];
    for (let n = node.nextElementSibling; n; n = n.nextElementSibling) nodes.push(n);
    return nodes;
  }

  /** A new answer to the last message; the one shown stays, as an earlier version (‹ ›). */
  function regenerate(pane) {
    if (pane.run || pane.follow || !pane.chatId) return;
    const users = currentUsers(pane);
    const last = users[users.length - 1];
    if (!last) return;
    const after = following(last);
    const reused = after.length === 1 && after[0].yaoVersions && !after[0].yaoVersions.edits;
    let versions = reused ? after[0].yaoVersions : null;
    if (!versions) {
      versions = new Versions(null);
      last.after(versions.node);
      versions.add().append(...after);
    }
    versions.nested = last.parentElement !== pane.node;
    if (pane.approvals) pane.approvals.superseded();
    stream(`/api/chats/${enc(pane.chatId)}/regenerate`, {}, { pane, versions });
  }

  function editAction(block, content, pane) {
    const button = h("button", "secondary small needs-idle edit", "Edit");
    button.type = "button";
    button.setAttribute("aria-label", "Edit and resend this message");
    button.addEventListener("click", () => startEditing(block, content, pane));
    return button;
  }

  /** The message becomes a text field; sent, the chat goes on from it and what it replaces is kept as an
   *  earlier version. */
  function startEditing(block, content, pane) {
    if (!pane.chatId || pane.run || pane.follow || block.querySelector(".edit-form")) return;
    const form = h("form", "edit-form");
    const area = h("textarea", "edit-text");
    area.value = textOf(content);
    area.rows = Math.min(10, Math.max(2, area.value.split("\n").length));
    area.setAttribute("aria-label", "Edit your message");
    const save = h("button", "small", "Send edited message");
    save.type = "submit";
    const cancel = h("button", "secondary small", "Cancel");
    cancel.type = "button";
    const row = h("div", "edit-actions");
    row.append(save, cancel);
    form.append(area, row);
    const shown = [...block.querySelectorAll(":scope > .bubble, :scope > .msg-actions")];
    const close = () => {
      form.remove();
      for (const node of shown) node.hidden = false;
      block.querySelector(".edit").focus();
    };
    for (const node of shown) node.hidden = true;
    block.append(form);
    area.focus();
    cancel.addEventListener("click", close);
    area.addEventListener("keydown", (event) => {
      if (event.key === "Escape") close();
    });
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      resend(block, content, area.value.trim(), pane, close);
    });
  }

  async function resend(block, content, text, pane, close) {
    if (!text || pane.run || pane.follow) return;
    let messageId = null;
    try {
      messageId = await messageIdOf(block, pane);
    } catch (err) {
      report(err);
      return;
    }
    if (!messageId) {
      report(new Error("This message is not in the stored chat (yet). Reload the chat and try again."));
      return;
    }
    close();
    const images = imagesOf(content).map((url) => ({ type: "image_url", image_url: { url } }));
    const edited = images.length ? [{ type: "text", text }, ...images] : text;
    const after = following(block);
    const versions = new Versions(null);
    versions.edits = true;
    block.before(versions.node);
    versions.add().append(block, ...after);
    versions.nested = versions.node.parentElement !== pane.node;
    if (pane.approvals) pane.approvals.superseded();
    stream(`/api/chats/${enc(pane.chatId)}/edit`, { message_id: messageId, content: edited },
      { pane, versions, userContent: edited });
  }

  /** The last answer of the chat offers Regenerate (once the chat is stored and nothing streams in it). */
  function decorate(pane) {
    for (const old of pane.node.querySelectorAll(".regenerate")) old.remove();
    const users = currentUsers(pane);
    const last = users[users.length - 1];
    if (!pane.chatId || !last) return;
    const turns = [...pane.node.querySelectorAll(".turn")].filter(
      (t) => !t.closest(".version.earlier") && last.compareDocumentPosition(t) & Node.DOCUMENT_POSITION_FOLLOWING,
    );
    const turn = turns[turns.length - 1];
    if (!turn || turn.dataset.unanswerable) return;
    const button = h("button", "secondary small needs-idle regenerate", "Regenerate");
    button.type = "button";
    button.setAttribute("aria-label", "Regenerate the answer (the one shown is kept as an earlier version)");
    button.disabled = Boolean(pane.run || pane.follow);
    button.addEventListener("click", () => regenerate(pane));
    turn.append(button);
  }

  /** One assistant turn: the blocks of its messages, tool cards, notices and the run's end. */
  class Turn {
    constructor(label, pane, parent = pane.node) {
      this.pane = pane;
      this.node = h("div", "turn");
      this.node.append(h("div", "who", label || "Assistant"));
      parent.append(this.node);
      this.messages = new Map(); // message_id → {kind, node, body, text, markdown}
      this.cards = new Map(); // tool_call_id → card
      this.fallbacks = { from: [], to: null }; // connectors that could not answer, and the one that did
      this.approvals = null; // the ApprovalPanel of a run that stops for approvals
      this.sources = null; // the Sources panel: what the search step gave the model, cited ones marked
    }

    place(node, threadId) {
      if (threadId) {
        node.classList.add("nested");
        node.prepend(h("div", "thread-label", `↳ in thread ${threadId}`));
      }
      this.node.append(node);
      scrollDown(this.pane);
      return node;
    }

    // -- live events

    /** One event of the run (stream_start and stream_end are the stream's own). */
    event(e) {
      const handle = {
        message_start: () => this.start(e),
        message_delta: () => this.delta(e),
        message_end: () => this.end(e),
        tool_result: () => this.toolResult(e),
        fallback: () => this.fallback(e),
        compaction: () => this.compaction(e),
        references: () => this.references(e.references),
        approval_request: () => this.approvalRequest(e),
      }[e.type];
      if (handle) handle(); // an event this page does not know yet is passed over
    }

    start(e) {
      if (this.messages.has(e.message_id)) return this.messages.get(e.message_id);
      if (e.continues && e.kind === "text") {
        const continued = this.continued(e);
        if (continued) return continued;
      }
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
        const markdown = e.kind === "text" && Boolean(md); // the assistant's reply; other kinds stay as sent
        const node = h("div", `msg assistant kind-${e.kind}`);
        if (e.kind !== "text") node.append(h("div", "kind-label", e.kind === "error" ? "Error" : e.kind));
        const body = h("div", markdown ? "bubble markdown" : "bubble");
        node.append(body);
        entry = { kind: e.kind, node: this.place(node, e.thread_id), body, markdown, frame: 0 };
        node.dataset.messageId = e.message_id;
        node.yaoEntry = entry;
      }
      entry.text = "";
      if (entry.body && !entry.markdown) {
        entry.textNode = document.createTextNode("");
        entry.body.append(entry.textNode);
      }
      this.messages.set(e.message_id, entry);
      return entry;
    }

    /** A resumed reply that goes on from where a stopped one broke off: the words already shown take the
     *  new ones after them (the server stores the two as one message that `continues` the fragment). */
    continued(e) {
      const node = this.pane.node.querySelector(`[data-message-id="${CSS.escape(e.continues)}"]`);
      const old = node && node.yaoEntry;
      if (!old) return null;
      for (const badge of node.querySelectorAll(":scope > .badge.status-incomplete")) badge.remove();
      const entry = { ...old, frame: 0 };
      node.dataset.messageId = e.message_id;
      node.yaoEntry = entry;
      this.messages.set(e.message_id, entry);
      return entry;
    }

    /** Render a streaming reply at most once per frame: deltas arrive far more often than the screen changes. */
    schedule(entry) {
      if (entry.frame) return;
      entry.frame = requestAnimationFrame(() => {
        entry.frame = 0;
        md.render(entry.body, entry.text);
        scrollDown(this.pane);
      });
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
        if (entry.markdown) this.schedule(entry);
        else entry.textNode.appendData(e.text);
      }
      scrollDown(this.pane);
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
        if (entry.markdown) {
          cancelAnimationFrame(entry.frame);
          entry.frame = 0;
          if (full) entry.text = full;
          md.render(entry.body, entry.text);
        } else if (full && full !== entry.text) {
          entry.body.textContent = full;
        }
        if (entry.kind === "reasoning") entry.node.open = false;
        if (entry.kind === "text") this.finish(entry);
        if (e.status === "incomplete") entry.node.append(h("span", "badge status-incomplete", "incomplete"));
      }
      scrollDown(this.pane);
    }

    /** A finished reply: its citations lead to their sources, its code blocks and itself can be copied. */
    finish(entry) {
      if (this.sources) {
        this.sources.cite(entry.text);
        this.sources.link(entry.body);
      }
      if (entry.markdown) addCodeCopies(entry.body);
      if (!entry.node.querySelector(":scope > .msg-actions")) entry.node.append(messageActions(() => entry.text));
    }

    toolResult(e) {
      const card = this.cards.get(e.tool_call_id) || this.card(e.tool_call_id, e.thread_id);
      if (!card.nameNode.textContent) card.nameNode.textContent = e.tool;
      card.serverNode.textContent = e.server ? `on ${e.server}` : "";
      if (e.approval) card.querySelector(".card-head").append(approvalBadge(e.approval));
      if (e.waiting) {
        // the stored stand-in of a call that waits for a person: it has not run, so there is no result yet
        card.resultNode.replaceChildren(h("span", "badge status-waiting", "waiting for approval"));
        return;
      }
      const result = h("div", "tool-result");
      const label = e.error ? "Error" : "Result";
      result.append(h("div", "card-label", e.attempt > 1 ? `${label} (attempt ${e.attempt})` : label));
      result.append(h("pre", null, e.error ? e.error : pretty(e.result)));
      if (e.error) card.classList.add("failed");
      card.resultNode.replaceChildren(result);
      scrollDown(this.pane);
    }

    /** Noted, and said only under a completed reply: which model answered when the first choice could not. */
    fallback(e) {
      if (e.from && !this.fallbacks.from.includes(e.from)) this.fallbacks.from.push(e.from);
      this.fallbacks.to = e.to;
    }

    fallbackNote() {
      const { from, to } = this.fallbacks;
      if (!to || !from.length) return null;
      const skipped = from.join(", ");
      return h("span", "run-fallback", `answered by ${to} — ${skipped} ${from.length > 1 ? "were" : "was"} unavailable`);
    }

    notice(text, kind = "notice") {
      this.place(h("div", kind === "error" ? "notice error" : "notice", text));
    }

    /** What the search step found (a `references` event, or a stored reply's): listed beside the answer. */
    references(list) {
      if (!list || !list.length) return;
      if (!this.sources) this.sources = new Sources(this.node);
      this.sources.add(list);
    }

    /** Earlier turns were summarised to fit the model's window (they stay stored): one quiet line. */
    compaction(e) {
      const count = `${e.messages_summarised} earlier message${e.messages_summarised === 1 ? "" : "s"}`;
      this.place(h("div", "notice compaction", `${count} summarised to fit the model's window ` +
        `(${e.tokens_before} → ${e.tokens_after} tokens, by ${e.connector})`));
    }

    /** A stored summary: a marker where it was made, its text folded away; what it covers is listed above. */
    summary(m, covered) {
      const details = h("details", "notice compaction");
      const label = `Summary of ${covered} earlier message${covered === 1 ? "" : "s"}`;
      details.append(h("summary", null, label), h("div", "summary-text", textOf(m.content)));
      this.place(details);
    }

    /** A call that waits for a person: its tool card says so, and the turn's panel gets a card to decide it. */
    approvalRequest(e) {
      const card = this.cards.get(e.tool_call_id);
      if (card) card.resultNode.replaceChildren(h("span", "badge status-waiting", "waiting for approval"));
      if (!this.approvals) this.approvals = new ApprovalPanel(this.node, this.pane);
      this.approvals.add(e);
    }

    /** `stream_end` of a waiting run lists every pending call: any whose request event was missed is added. */
    approvalsFrom(e) {
      for (const request of e.approvals || []) this.approvalRequest(request);
    }

    apiError(err) {
      this.place(h("div", "msg assistant kind-error api-error", `Could not send the message: ${plainError(err)}`));
    }

    /** The run's end: a quiet line when it completed; otherwise one plain sentence, the details folded away. */
    streamEnd(e) {
      const box = h("div", `run-end status-${e.status}`);
      box.dataset.status = e.status;
      box.dataset.reason = e.reason || "";
      const head = h("div", "run-end-head");
      head.append(h("span", `badge status-${e.status}`, e.status));
      if (e.status !== "completed") head.append(h("span", "run-message", whyNot(e)));
      if (unreadable(e)) this.node.dataset.unanswerable = "true"; // nothing to answer again: no Regenerate
      head.append(h("span", "run-duration", seconds(e.duration_ms)));
      const tokens = e.usage && e.usage.total_tokens;
      if (tokens) head.append(h("span", "run-usage", `${tokens} tokens`));
      const note = e.status === "completed" ? this.fallbackNote() : null;
      if (note) head.append(note);
      box.append(head);
      if (e.status === "failed") box.append(runDetails(e));
      if (e.output !== undefined && e.output !== null) this.output(e.output);
      if (e.next !== undefined && e.next !== null) {
        const details = h("details", "run-next");
        details.open = true;
        details.append(h("summary", null, "Next"), h("pre", null, pretty(e.next)));
        box.append(details);
      }
      this.place(box);
    }

    /** A run with an output schema: its validated value is the answer; the model's replies (the accepted
     *  one and any the schema rejected, which were asked again) are folded under "details". */
    output(value) {
      const replies = [...this.messages.values()].filter((m) => m.kind === "text" && m.node.isConnected);
      const box = h("div", "msg assistant structured-output");
      box.append(h("div", "kind-label", "Answer"), h("pre", "output-value", pretty(value)));
      box.append(messageActions(() => pretty(value)));
      this.place(box);
      if (!replies.length) return;
      const details = h("details", "output-attempts");
      const rejected = replies.length - 1;
      details.append(h("summary", null, rejected
        ? `details: the model's ${replies.length} replies (${rejected} did not match the schema and were asked again)`
        : "details: the model's reply"));
      for (const reply of replies) details.append(reply.node);
      this.place(details);
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
        const result = textOf(m.content);
        // A call still waiting for a person is stored with a stand-in result that starts "waiting:".
        const waiting = !m.approval && result.startsWith("waiting:");
        this.toolResult({ tool_call_id: m.tool_call_id, tool: "", server: "", result, attempt: 1,
                          approval: m.approval, waiting });
        return;
      }
      const incomplete = m.status === "incomplete" ? "incomplete" : "completed";
      if (m.reasoning) {
        this.start({ message_id: `${m.message_id}:r`, kind: "reasoning", thread_id: m.thread_id });
        this.end({ message_id: `${m.message_id}:r`, kind: "reasoning", content: m.reasoning, status: incomplete });
      }
      const text = textOf(m.content);
      this.references(m.references);
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

  /** The sources of a reply: each reference the model was given, `[n] title › heading`, its text folded away;
   *  those the reply cites are marked and opened, and a cited number that matches none is said plainly. */
  class Sources {
    constructor(turnNode) {
      this.node = h("details", "sources");
      this.node.open = true;
      this.summary = h("summary", null, "Sources");
      this.list = h("ol", "source-list");
      this.warning = h("p", "source-unknown");
      this.warning.hidden = true;
      this.node.append(this.summary, this.list, this.warning);
      this.items = new Map(); // n → li
      this.turnNode = turnNode;
      turnNode.append(this.node);
    }

    add(references) {
      for (const r of references) {
        if (this.items.has(r.n)) continue;
        const item = h("li", "source");
        item.value = r.n;
        item.dataset.n = String(r.n);
        const where = r.heading && (r.heading === r.title || r.heading.startsWith(`${r.title} › `))
          ? r.heading : [r.title, r.heading].filter(Boolean).join(" › ");
        item.dataset.where = where;
        const head = h("details", "source-item");
        const label = h("summary", null, `[${r.n}] ${where}`);
        label.append(h("span", "source-origin", r.source === "web" ? " · web" : ` · ${r.collection}`));
        head.append(label, h("blockquote", "source-text", r.text));
        if (r.url && /^https?:\/\//.test(r.url)) {
          const link = h("a", "source-link", r.url);
          link.href = r.url;
          link.rel = "noopener noreferrer";
          link.target = "_blank";
          head.append(link);
        }
        item.append(head);
        this.items.set(r.n, item);
        this.list.append(item);
      }
      this.summary.textContent = `Sources (${this.items.size})`;
    }

    /** Each `[n]` in a rendered reply that names a source becomes a button that opens that source. */
    link(body) {
      const skip = (node) => node.parentElement.closest("pre, code, a, button");
      const walker = document.createTreeWalker(body, NodeFilter.SHOW_TEXT, {
        acceptNode: (node) => (skip(node) ? NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT),
      });
      const found = [];
      while (walker.nextNode()) if (/\[\d{1,3}\]/.test(walker.currentNode.data)) found.push(walker.currentNode);
      for (const node of found) {
        const pieces = node.data.split(/(\[\d{1,3}\])/);
        const fragment = document.createDocumentFragment();
        for (const piece of pieces) {
          const number = /^\[(\d{1,3})\]$/.exec(piece);
          const item = number && this.items.get(Number(number[1]));
          fragment.append(item ? this.citation(Number(number[1]), item) : piece);
        }
        node.replaceWith(fragment);
      }
    }

    citation(n, item) {
      const button = h("button", "cite", `[${n}]`);
      button.type = "button";
      button.setAttribute("aria-label", `Source ${n}: ${item.dataset.where}`);
      button.addEventListener("click", () => {
        const details = item.querySelector("details");
        details.open = true;
        this.node.open = true;
        item.scrollIntoView({ block: "nearest" });
        details.querySelector("summary").focus();
        item.classList.remove("flash");
        void item.offsetWidth; // restart the highlight
        item.classList.add("flash");
      });
      return button;
    }

    /** Mark what `text` cites as [n]; say which cited numbers match no source. */
    cite(text) {
      this.turnNode.append(this.node); // beside (after) the answer it supports
      const cited = new Set([...String(text).matchAll(/\[(\d{1,3})\]/g)].map((m) => Number(m[1])));
      const unknown = [...cited].filter((n) => !this.items.has(n));
      for (const [n, item] of this.items) {
        item.classList.toggle("cited", cited.has(n));
        if (cited.has(n)) item.querySelector("details").open = true;
      }
      this.warning.hidden = !unknown.length;
      this.warning.textContent = unknown.length
        ? `The answer cites ${unknown.map((n) => `[${n}]`).join(", ")}, which ${unknown.length === 1 ? "matches" : "match"} no source.`
        : "";
    }
  }

  /** Why a run did not complete, in a sentence; a model that cannot read the images sent is said as such. */
  function unreadable(e) {
    return e.reason === "model_error" && Boolean(e.error) && /cannot read images/.test(errorText(e.error));
  }

  function whyNot(e) {
    if (unreadable(e)) {
      return "This assistant's model cannot read images, so the message was not sent to it (it stays in the " +
        "chat). Send it again without the images, or choose an assistant that can read them.";
    }
    return REASONS[e.reason] || "The answer could not be finished.";
  }

    /** Folded: the run id an operator finds the run by in the server's log, and the error it stored, once. */
  function runDetails(e) {
    const details = h("details", "run-details");
    details.append(h("summary", null, `details: run ${e.run_id}`));
    details.append(h("pre", "run-error", e.error ? errorText(e.error) : "No more was recorded about this failure."));
    details.addEventListener("toggle", () => {
      if (details.open) details.scrollIntoView({ block: "nearest" });
    });
    return details;
  }

  /** "approved by alice" / "denied by alice: reason": who decided a call, on its stored result. */
  function approvalBadge(approval) {
    const by = approval.by ? ` by ${approval.by}` : "";
    const text = approval.approved
      ? `approved${by}`
      : `denied${by}${approval.reason ? `: ${approval.reason}` : ""}`;
    const badge = h("span", `badge approval-badge ${approval.approved ? "approved" : "denied"}`, text);
    if (approval.at) badge.title = `decided ${when(approval.at)}`;
    return badge;
  }

  /** The name the model calls a tool by (CONTRACT §3.4): `<server>__<tool>`, dots in the server id as `_`. */
  function toolName(server, tool) {
    return server ? `${String(server).replace(/\./g, "_")}__${tool}` : String(tool || "");
  }

  let panels = 0; // numbers the panels' headings, for aria-labelledby

  /** The calls a waiting run asks a person about: per call a card with the tool, its arguments, Approve,
   *  and Deny with an optional reason. The API takes the decisions of a run all at once, so they go out
   *  when every call has a choice; the continuation then streams below like any run. */
  class ApprovalPanel {
    constructor(parent, pane) {
      this.parent = parent; // the turn (or pane) whose tool cards show these calls
      this.pane = pane;
      this.calls = new Map(); // tool_call_id → {request, card, approve, deny, reason, note, choice}
      this.chatId = null;
      this.ready = false; // the run has ended waiting: the chat is free, decisions can go out
      this.posting = false;
      this.done = false; // decided (here, or by a new message): nothing more to choose
      this.node = h("section", "approvals");
      const heading = h("h3", "approvals-title", "Waiting for your approval");
      heading.id = `approvals-title-${++panels}`;
      heading.tabIndex = -1; // focused when the panel opens, so a screen reader says what is asked
      this.heading = heading;
      this.node.setAttribute("aria-labelledby", heading.id);
      this.intro = h("p", "approvals-intro", "The assistant wants to use a tool that needs your approval. " +
        "Nothing has run yet.");
      this.list = h("div", "approval-list");
      this.progress = h("p", "approvals-progress muted");
      this.progress.setAttribute("role", "status");
      this.error = h("div", "approvals-error");
      this.error.setAttribute("role", "alert");
      this.error.hidden = true;
      this.node.append(heading, this.intro, this.list, this.progress, this.error);
      parent.append(this.node);
      this.sync();
      scrollDown(this.pane);
    }

    add(request) {
      if (this.calls.has(request.tool_call_id)) return;
      const name = toolName(request.server, request.tool);
      const card = h("div", "card approval-card");
      card.dataset.toolCallId = request.tool_call_id;
      const head = h("div", "card-head");
      head.append(h("span", "card-label", "Tool call"), h("code", "tool-name", name));
      // Arguments come from the model: shown as text (textContent), laid out as JSON. Text the server
      // sends as a string is what the model wrote but no plain JSON (a key twice, 1e999): shown verbatim,
      // since parsing it here would show one reading of it, not what was written.
      const shown = typeof request.arguments === "string" ? request.arguments : pretty(request.arguments);
      const args = h("pre", "approval-args", shown);
      const actions = h("div", "approval-actions");
      const approve = h("button", "approve", "Approve");
      approve.type = "button";
      approve.setAttribute("aria-label", `Approve ${name}`);
      const deny = h("button", "danger deny", "Deny");
      deny.type = "button";
      deny.setAttribute("aria-label", `Deny ${name}`);
      const reason = h("input", "deny-reason");
      reason.type = "text";
      reason.maxLength = 2000; // the API's limit for a reason
      reason.placeholder = "Reason for denying (optional)";
      reason.setAttribute("aria-label", `Reason for denying ${name} (optional)`);
      reason.spellcheck = true;
      for (const button of [approve, deny]) button.setAttribute("aria-pressed", "false");
      actions.append(approve, deny, reason);
      const note = h("p", "approval-note");
      note.hidden = true;
      card.append(head, args, actions, note);
      const call = { request, card, approve, deny, reason, note, choice: null };
      this.calls.set(request.tool_call_id, call);
      approve.addEventListener("click", () => this.choose(call, true));
      deny.addEventListener("click", () => this.choose(call, false));
      reason.addEventListener("keydown", (event) => {
        if (event.key === "Enter" && !event.isComposing) {
          event.preventDefault();
          this.choose(call, false); // a reason typed and Enter: the denial it explains
        }
      });
      this.list.append(card);
      this.sync();
      scrollDown(this.pane);
    }

    /** The run has ended waiting for these calls: they can be decided now. */
    open(chatId, focus) {
      this.chatId = chatId;
      this.ready = true;
      this.pane.approvals = this;
      this.sync();
      if (!this.pane.visible) return; // said when the person opens this chat
      setStatus(`Waiting for your approval (${this.calls.size === 1 ? "1 tool call" : `${this.calls.size} tool calls`}).`,
        "waiting");
      if (focus) this.heading.focus({ preventScroll: true });
      scrollDown(this.pane);
    }

    choose(call, approve) {
      if (!this.ready || this.posting || this.done) return;
      call.choice = { approve };
      call.card.dataset.choice = approve ? "approved" : "denied";
      call.approve.setAttribute("aria-pressed", String(approve));
      call.deny.setAttribute("aria-pressed", String(!approve));
      this.sync();
      if ([...this.calls.values()].every((c) => c.choice)) this.submit();
    }

    /** Every call has a choice: send them all; the continuation streams as a run does. */
    async submit() {
      if (this.pane.run) {
        this.fail("Another answer is still streaming in this chat. Wait for it, then decide again.");
        return;
      }
      const decisions = [...this.calls.values()].map(({ request, choice, reason }) => {
        if (choice.approve) return { tool_call_id: request.tool_call_id, approve: true };
        const why = reason.value.trim();
        return why
          ? { tool_call_id: request.tool_call_id, approve: false, reason: why }
          : { tool_call_id: request.tool_call_id, approve: false };
      });
      this.decisions = decisions;
      this.posting = true;
      this.error.hidden = true;
      this.sync();
      await stream(`/api/chats/${enc(this.chatId)}/approvals`, { decisions }, { decided: this, pane: this.pane });
      this.posting = false;
      this.sync(); // stopped before the server answered: the buttons come back (a repeat says if it was taken)
    }

    /** The server took the decisions: each card says what was decided; the run goes on below. */
    accepted() {
      this.done = true;
      if (this.pane.approvals === this) this.pane.approvals = null;
      for (const decision of this.decisions) {
        const call = this.calls.get(decision.tool_call_id);
        const said = decision.approve ? "Approved" : `Denied${decision.reason ? `: ${decision.reason}` : ""}`;
        this.settle(call, decision.approve ? "approved" : "denied", said);
      }
      this.heading.textContent = "Your decisions";
      this.intro.hidden = true;
      this.sync();
    }

    /** The server refused the decisions: its error said where they were made. Refused for being stale
     *  (decided elsewhere: 404, 409), nothing is left to decide here; otherwise the person may try again. */
    refused(err) {
      if (err instanceof ApiError && err.status === 401) return; // the token field says it
      const gone = err instanceof ApiError && (err.status === 404 || err.status === 409);
      if (gone) {
        this.done = true;
        if (this.pane.approvals === this) this.pane.approvals = null;
      }
      this.fail(`Your decisions were not accepted: ${plainError(err)}`, gone);
    }

    fail(text, offerReload) {
      this.error.replaceChildren(h("span", null, text));
      if (offerReload && this.chatId) {
        const chatId = this.chatId;
        const reload = h("button", "secondary small", "Reload the chat");
        reload.type = "button";
        reload.addEventListener("click", () => openChat(chatId));
        this.error.append(reload);
      }
      this.error.hidden = false;
      this.sync();
    }

    /** A new message was sent meanwhile: the server denies what waits (CONTRACT §4.8), and says so here. */
    superseded() {
      this.done = true;
      if (this.pane.approvals === this) this.pane.approvals = null;
      for (const call of this.calls.values()) this.settle(call, "denied", "Denied: you sent a new message");
      this.intro.hidden = true;
      this.sync();
    }

    settle(call, choice, said) {
      call.card.dataset.choice = choice;
      call.note.textContent = said;
      call.note.hidden = false;
      call.card.querySelector(".approval-actions").hidden = true;
      // The call's tool card above said it waits; it no longer does.
      for (const tool of this.parent.querySelectorAll(".tool-card")) {
        const badge = tool.dataset.toolCallId === call.request.tool_call_id && tool.querySelector(".badge.status-waiting");
        if (badge) badge.replaceWith(h("span", `badge approval-badge ${choice}`, choice));
      }
    }

    /** Buttons, reason fields and the progress line, from the panel's state. */
    sync() {
      const locked = !this.ready || this.posting || this.done;
      for (const call of this.calls.values()) {
        call.approve.disabled = locked;
        call.deny.disabled = locked;
        call.reason.disabled = locked;
      }
      this.node.setAttribute("aria-busy", this.posting ? "true" : "false");
      const total = this.calls.size;
      const chosen = [...this.calls.values()].filter((c) => c.choice).length;
      let text = "";
      if (this.posting) text = "Sending your decisions…";
      else if (this.done) text = "";
      else if (total > 1 && this.ready) text = `${chosen} of ${total} decided. The run goes on once every call is decided.`;
      this.progress.textContent = text;
      this.progress.hidden = !text;
    }
  }

  /** The open chat's calls waiting for a person, as a panel under its history (404: none wait). */
  async function checkApprovals() {
    const chatId = state.chatId;
    const pane = state.pane;
    if (!chatId || !authed() || pane.run) return false;
    let pending = null;
    try {
      const res = await request("GET", `/api/chats/${enc(chatId)}/approvals`);
      if (res.ok) pending = await res.json();
      else if (res.status !== 404) throw await errorOf(res);
    } catch (err) {
      report(err);
    }
    if (!pending || pane !== state.pane || pane.run || !(pending.approvals || []).length) return false;
    const turns = pane.node.querySelectorAll(".turn");
    const parent = turns.length ? turns[turns.length - 1] : pane.node;
    const panel = new ApprovalPanel(parent, pane);
    for (const request of pending.approvals) panel.add(request);
    panel.open(chatId, true);
    return true;
  }

  /** How many stored messages a summary covers: its `summarises` range, other summaries aside. */
  function coveredCount(messages, summary) {
    const [first, last] = summary.summarises || [];
    const from = messages.findIndex((m) => m.message_id === first);
    const to = messages.findIndex((m) => m.message_id === last);
    return from < 0 || to < from ? 0 : messages.slice(from, to + 1).filter((m) => m.role !== "summary").length;
  }

  /** The stored chat in `pane`: the current messages, and where an answer was regenerated or a message
   *  edited, the earlier versions beside the current one (the server marks them `replaced_by` its run). */
  function renderHistory(messages, pane) {
    pane.node.replaceChildren();
    const continued = new Set(messages.map((m) => m.continues).filter(Boolean)); // fragments a Continue finished
    const shown = messages.filter((m) => !continued.has(m.message_id));
    let i = 0;
    let place = new Placer(pane, pane.node, shown);
    while (i < shown.length) {
      if (!shown[i].replaced_by) {
        place.message(shown[i++]);
        continue;
      }
      i = placeVersions(shown, i, pane);
      place = new Placer(pane, pane.node, shown); // what follows starts a turn of its own
    }
    if (!shown.length) pane.node.append(h("p", "muted", "This chat has no messages."));
    decorate(pane);
    if (pane.visible) ui.transcript.scrollTop = ui.transcript.scrollHeight;
  }

  /** Lays stored messages out in a container: a person's messages, and each run's replies as one turn. */
  class Placer {
    constructor(pane, parent, all) {
      this.pane = pane;
      this.parent = parent;
      this.all = all; // the whole history: a summary counts what it covers in it
      this.turn = null;
      this.turnRun = null;
    }

    message(m) {
      if (m.role === "user") {
        addUser(m.content, this.pane, this.parent, m.message_id);
        this.turn = null;
        return;
      }
      // A result the continuation of a run stored (a decision, a resume) replaces its call's stand-in in
      // place: it is shown on the call's card, not as a card of its own under another run.
      const ownCall = m.role === "tool" && this.turn && this.turn.cards.has(m.tool_call_id);
      if (!this.turn || (m.run_id !== this.turnRun && !ownCall)) {
        this.turn = new Turn(undefined, this.pane, this.parent);
        this.turnRun = m.run_id;
      }
      if (m.role === "summary") this.turn.summary(m, coveredCount(this.all, m));
      else this.turn.stored(m);
    }
  }

  /** The earlier versions starting at `messages[from]` (one per run that replaced them), then the current
   *  one: what the last replacing run stored. Returns the index after them. */
  function placeVersions(messages, from, pane) {
    const earlier = new Map(); // replacing run id → its messages
    let i = from;
    for (; i < messages.length && messages[i].replaced_by; i++) {
      const by = messages[i].replaced_by;
      if (!earlier.has(by)) earlier.set(by, []);
      earlier.get(by).push(messages[i]);
    }
    const last = messages[i - 1].replaced_by;
    const current = [];
    // The current version: an edited message's new text, and what the replacing run answered.
    const edited = earlier.get(last)[0].role === "user";
    if (i < messages.length && messages[i].role === "user" && (messages[i].run_id === last || edited)) {
      current.push(messages[i++]);
    }
    for (; i < messages.length && messages[i].run_id === last && !messages[i].replaced_by; i++) current.push(messages[i]);
    const versions = new Versions(pane.node);
    versions.edits = edited;
    for (const group of [...earlier.values(), current]) {
      const place = new Placer(pane, versions.add(), messages);
      for (const m of group) place.message(m);
    }
    versions.show(versions.items.length - 1);
    return i;
  }

  // ---------------------------------------------------------------- streaming

  /** The controls follow the chat on screen: a run streaming in it (or one it follows) holds its composer,
   *  while every other chat, and a new one, can be used meanwhile. */
  function syncControls() {
    const pane = state.pane;
    const run = pane ? pane.run : null;
    const busy = Boolean(run || (pane && pane.follow));
    const signedIn = authed() && !ui.signedIn.hidden;
    ui.send.disabled = busy || !signedIn;
    ui.stop.disabled = !busy || Boolean(run && run.stopping);
    ui.newChat.disabled = !signedIn;
    ui.assistant.disabled = busy || !state.assistants.length;
    ui.resume.disabled = busy;
    ui.renameChat.disabled = busy;
    ui.deleteChat.disabled = busy;
    attachments.sync(busy || !signedIn);
    for (const button of pane ? pane.node.querySelectorAll(".needs-idle") : []) button.disabled = busy;
    ui.composer.setAttribute("aria-busy", busy ? "true" : "false");
    ui.transcript.setAttribute("aria-busy", busy ? "true" : "false");
  }

  function endStatus(e) {
    if (e.status === "completed") return `Completed in ${seconds(e.duration_ms)}.`;
    if (e.status === "cancelled") return `Stopped after ${seconds(e.duration_ms)}.`;
    if (e.status === "waiting") return "Waiting for approval.";
    return `Failed after ${seconds(e.duration_ms)}.`; // why: in the transcript, said once
  }

  function turnLabel({ decided, resuming, versions }) {
    if (decided) return "Assistant (continued)";
    if (resuming) return "Assistant (resumed)";
    return versions ? "Assistant (new version)" : "Assistant";
  }

  /** POST `path` and render the SSE run it answers with (a send, a resume, a decision's continuation, a
   *  regenerated answer or an edited message) into `pane`, which keeps filling while another chat is shown.
   *  `decided`: the approval panel whose decisions this POST sends; it is told whether the server took them
   *  (`accepted`) or refused them (`refused(err)`: said on the panel, not as a failed turn). `versions`: the
   *  widget whose new version this run writes (regenerate, edit); it goes back to the old one if refused. */
  async function stream(path, body, opts = {}) {
    const { userContent, decided, versions } = opts;
    const pane = opts.pane || state.pane;
    const say = (text, kind) => pane.visible && setStatus(text, kind);
    if (pane.visible) {
      clearError();
      ui.resumeBar.hidden = true;
    }
    const parent = versions ? versions.add() : pane.node;
    const userBlock = userContent !== undefined ? addUser(userContent, pane, parent) : null;
    const turn = new Turn(turnLabel(opts), pane, parent);
    turn.userBlock = userBlock;
    const run = { controller: new AbortController(), chatId: pane.chatId, stopping: false, turn };
    pane.run = run;
    if (pane.chatId) state.panes.set(pane.chatId, pane);
    stopFollowing(pane);
    syncControls();
    renderChats();
    say(decided ? "Sending your decisions…" : opts.resuming ? "Resuming the run…" : "Waiting for the assistant…", "busy");
    let waiting = null; // the stream_end of a run that stopped for approvals
    let sent = false; // the server took the request (a refused one leaves the chat as it was)
    try {
      const res = await request("POST", path, body, run.controller.signal);
      if (!res.ok) {
        refused(await errorOf(res), { turn, pane, opts, say });
        return;
      }
      sent = true;
      if (decided) decided.accepted();
      adoptChat(run, pane, res.headers.get("X-Chat-Id"));
      waiting = await follow(res.body, run, pane, say);
    } catch (err) {
      if (err instanceof ApiError && !sent) refused(err, { turn, pane, opts, say });
      else broken(err, turn, say);
    } finally {
      await settle(run, pane, { waiting, sent, versions });
    }
  }

  /** The events of the run as they come; returns its stream_end when it stopped for approvals. */
  async function follow(body, run, pane, say) {
    const turn = run.turn;
    let ended = false;
    let waiting = null;
    for await (const e of sseEvents(body)) {
      if (e.type === "stream_start") {
        adoptChat(run, pane, e.chat_id);
        if (!run.stopping) say(`Streaming from ${e.assistant_id}…`, "busy");
      } else if (e.type === "stream_end") {
        ended = true;
        if (e.status === "waiting") {
          waiting = e;
          turn.approvalsFrom(e);
        }
        turn.streamEnd(e);
        say(endStatus(e), e.status);
      } else if (e.type === "_unreadable") {
        turn.notice(`Unreadable event from the server: ${e.raw.slice(0, 200)}`, "error");
      } else {
        turn.event(e);
        // A new chat is stored once its input is written, which may be after the response named it: by its
        // first message it is, so the list shows it (answering) if the refresh at adoptChat came too soon.
        if (e.type === "message_start" && !state.chats.some((c) => c.chat_id === run.chatId)) refreshChats();
      }
    }
    if (!ended) {
      turn.notice("The connection closed before the run ended.", "error");
      say("The connection closed before the run ended.", "failed");
    }
    return waiting;
  }

  /** The server refused the request: nothing ran. Decisions say so on their panel; a message goes back into
   *  the composer; a new version that was not made is taken away again. */
  function refused(err, { turn, pane, opts, say }) {
    if (opts.decided) {
      turn.node.remove(); // the panel says why, where the person decided
      opts.decided.refused(err);
      say("Decisions not sent.", "failed");
      return;
    }
    if (opts.versions) {
      opts.versions.dropLatest();
      if (err.status !== 401 && pane.visible) report(err);
      say("Not sent.", "failed");
      return;
    }
    if (err.status !== 401) turn.apiError(err);
    if (turn.userBlock) turn.userBlock.classList.add("unsent"); // not stored: it cannot be edited
    say("Not sent.", "failed");
    if (opts.userContent !== undefined && pane.visible && !ui.message.value) ui.message.value = textOf(opts.userContent);
  }

  function broken(err, turn, say) {
    if (err && err.name === "AbortError") {
      turn.notice("Stopped.");
      say("Stopped.", "cancelled");
    } else {
      turn.notice("The connection to the server broke off before the answer ended.", "error");
      say("The connection broke off.", "failed");
    }
  }

  /** The run is over for this page: its pane is free again, the list shows how it ended. */
  async function settle(run, pane, { waiting, sent, versions }) {
    pane.run = null;
    syncControls();
    const turn = run.turn;
    // Decisions can go out once the run has ended (the chat is free), not before.
    if (waiting && turn.approvals) turn.approvals.open(run.chatId, pane.visible);
    if (!pane.visible && !waiting) state.panes.delete(pane.chatId); // opened again, it is read afresh
    await refreshChats();
    if (sent && versions && versions.nested && pane.visible) {
      await loadPane(pane, state.chats.find((c) => c.chat_id === pane.chatId)); // laid out as stored
      return;
    }
    decorate(pane);
    if (pane.visible) await checkResume();
  }

  /** The chat id the server gave a new chat: the pane, the list and a pending stop learn it. */
  function adoptChat(run, pane, chatId) {
    if (!chatId || run.chatId === chatId) return;
    run.chatId = chatId;
    pane.chatId = chatId;
    state.panes.set(chatId, pane);
    if (pane.visible) {
      sessionStorage.setItem(OPEN_KEY, chatId);
      showTitle(ui.chatTitle.textContent);
    }
    refreshChats(); // the new chat appears in the list, answering
    if (run.stopping) cancelRun(run, pane); // stop was pressed before the chat id was known
  }

  async function cancelRun(run, pane) {
    try {
      const answer = await api("POST", `/api/chats/${enc(run.chatId)}/cancel`);
      if (answer && answer.cancelled === 0 && pane.run === run) {
        run.stopping = false; // nothing was running yet (or any more): let the person try again
        syncControls();
      }
    } catch (err) {
      if (err instanceof ApiError && err.type === "no_active_run") return;
      report(err);
      if (pane.run === run) {
        run.stopping = false;
        syncControls();
      }
    }
  }

  /** Stop the open chat's run: this page's own, or one it only follows (started before a reload). */
  function stop() {
    const pane = state.pane;
    const run = pane.run;
    if (!run && pane.follow && pane.chatId) {
      setStatus("Stopping…", "busy");
      api("POST", `/api/chats/${enc(pane.chatId)}/cancel`).catch(report);
      return;
    }
    if (!run || run.stopping) return;
    run.stopping = true;
    syncControls();
    setStatus("Stopping…", "busy");
    if (run.chatId) cancelRun(run, pane);
    // else: the cancel goes out as soon as the response names the chat (adoptChat)
  }

  async function send(event) {
    event.preventDefault();
    const pane = state.pane;
    if (pane.run || pane.follow) return;
    const text = ui.message.value.trim();
    if (!authed()) {
      showAuth("Paste an API token first.", "error");
      ui.token.focus();
      return;
    }
    if (!text && !attachments.images.length) {
      ui.message.focus();
      return;
    }
    const assistant = ui.assistant.value;
    if (!assistant) {
      report(new Error("pick an assistant first"));
      return;
    }
    localStorage.setItem(ASSISTANT_KEY, assistant);
    const content = attachments.content(text);
    ui.message.value = "";
    attachments.clear();
    const body = { messages: [{ role: "user", content }] };
    if (pane.chatId) body.chat_id = pane.chatId;
    if (!pane.chatId) ui.chatTitle.textContent = (text || "Image").slice(0, 80);
    if (pane.approvals) pane.approvals.superseded();
    stopRenaming();
    await stream(`/api/assistants/${enc(assistant)}/runs`, body, { userContent: content, pane });
  }

  function resume() {
    const pane = state.pane;
    if (pane.run || pane.follow || !pane.chatId) return;
    stream(`/api/chats/${enc(pane.chatId)}/resume`, undefined, { resuming: true, pane });
  }

  // ---------------------------------------------------------------- rename, delete

  function startRenaming() {
    if (state.pane.run || !state.chatId) return;
    ui.renameInput.value = state.title;
    ui.chatTitle.hidden = true;
    ui.chatActions.hidden = true;
    ui.renameForm.hidden = false;
    ui.renameInput.focus();
    ui.renameInput.select();
  }

  function stopRenaming() {
    ui.renameForm.hidden = true;
    ui.chatTitle.hidden = false;
    ui.chatActions.hidden = !state.chatId;
  }

  async function rename(event) {
    event.preventDefault();
    const chatId = state.chatId;
    const title = ui.renameInput.value.trim();
    if (!chatId || !title) {
      ui.renameInput.focus();
      return;
    }
    try {
      const chat = await api("PATCH", `/api/chats/${enc(chatId)}`, { title });
      clearError();
      if (chatId === state.chatId) {
        stopRenaming();
        showTitle(chat.title);
      }
    } catch (err) {
      report(err);
      return;
    }
    await refreshChats();
  }

  async function deleteChat() {
    const chatId = state.chatId;
    if (state.pane.run || state.pane.follow || !chatId) return;
    const title = state.title || "this chat";
    if (!window.confirm(`Delete “${title}”? Its messages are removed for good.`)) return;
    try {
      await api("DELETE", `/api/chats/${enc(chatId)}`);
    } catch (err) {
      if (err instanceof ApiError && err.type === "chat_busy") {
        report(new Error("This chat is still answering. Stop it or wait for the answer, then delete it."));
      } else {
        report(err);
      }
      return;
    }
    if (state.chatId === chatId) newChat();
    setStatus(`Deleted “${title}”.`);
    await refreshChats();
  }

  // ---------------------------------------------------------------- wiring

  // A reload or a closed tab ends the streams this page reads, and with them their runs: say which, so the
  // page that comes next (a reload) resumes them.
  window.addEventListener("pagehide", () => {
    const cut = [...state.panes.values()].filter((p) => p.run && !p.run.stopping && p.chatId).map((p) => p.chatId);
    if (cut.length) sessionStorage.setItem(CUT_KEY, JSON.stringify(cut));
  });

  const attachments = new Attachments(ui, plainError);

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
  ui.signOut.addEventListener("click", async () => {
    if (state.session) {
      // The session ends on the server, for every tab and worker; the cookie goes with it.
      const res = await request("POST", "/auth/logout").catch(() => null);
      if (res && !res.ok && res.status !== 401) {
        report(await errorOf(res));
        return;
      }
    }
    forgetToken();
    newChat();
    if (state.oidc) {
      showAuth("Signed out. Sign in again to continue.", "info");
      return;
    }
    showAuth("Signed out. Paste a token to sign in again.", "info");
    ui.token.focus();
  });
  ui.assistant.addEventListener("change", () => localStorage.setItem(ASSISTANT_KEY, ui.assistant.value));
  ui.newChat.addEventListener("click", newChat);
  ui.search.addEventListener("input", searchChats);
  ui.renameChat.addEventListener("click", startRenaming);
  ui.renameForm.addEventListener("submit", rename);
  ui.renameCancel.addEventListener("click", stopRenaming);
  ui.renameInput.addEventListener("keydown", (event) => {
    if (event.key === "Escape") stopRenaming();
  });
  ui.deleteChat.addEventListener("click", deleteChat);
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

  // What the page's other scripts (usage.js) share of it: the signed-in request, whose 401 signs out here.
  window.yaoChat = Object.freeze({
    signedIn: () => authed() && !ui.signedIn.hidden,
    request,
    errorOf,
    plainError,
    ApiError,
  });

  /** How this server signs pages in: with the identity provider when it has one (then maybe already), else a token. */
  async function start() {
    showPane(new Pane(null));
    try {
      const res = await fetch("/auth/session", { headers: { Accept: "application/json" } });
      const session = res.ok ? await res.json() : {};
      state.oidc = Boolean(session.oidc);
      if (session.signed_in) state.session = session;
    } catch {
      state.oidc = false; // the server could not be asked: the token form still works once it answers
    }
    setSignedIn(false);
    if (state.session) {
      signIn("");
    } else if (state.oidc) {
      showAuth("Sign in with your organisation's account to start.", "info");
    } else if (state.token) {
      signIn(state.token);
    } else {
      showAuth("Paste an API token to start (create one with: yao-agent tokens create).", "info");
    }
  }

  start();
})();
