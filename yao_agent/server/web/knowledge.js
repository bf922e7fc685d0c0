// Knowledge in the web chat: the collections the signed-in caller may search, and adding a document to one
// (a team admin's team collection; the server answers anyone else with a 403 that says why). Uses app.js's
// signed-in request (window.yaoChat), so a 401 signs the page out there.
"use strict";

(() => {
  const chat = window.yaoChat;
  if (!chat) return;
  const $ = (id) => document.getElementById(id);
  const ui = {
    section: $("knowledge"),
    form: $("knowledge-form"),
    collection: $("knowledge-collection"),
    file: $("knowledge-file"),
    upload: $("knowledge-upload"),
    status: $("knowledge-status"),
  };
  let shown = false; // the section is filled for the current sign-in

  function say(text, failed = false) {
    ui.status.textContent = text;
    ui.status.classList.toggle("failed", failed);
  }

  async function load() {
    const res = await chat.request("GET", "/api/knowledge");
    if (!res.ok) throw await chat.errorOf(res);
    const collections = (await res.json()).data || [];
    ui.collection.replaceChildren();
    for (const c of collections) {
      const option = document.createElement("option");
      option.value = c.id;
      const whose = c.origin === "team" ? `team ${c.team_id}` : "app";
      option.textContent = `${c.name} (${whose}, ${c.documents} document${c.documents === 1 ? "" : "s"})`;
      ui.collection.append(option);
    }
    ui.section.hidden = collections.length === 0;
  }

  /** Add `file` to the chosen collection; what happened, in a sentence. */
  async function add(file) {
    const body = new FormData();
    body.append("file", file, file.name);
    const res = await chat.request("POST", `/api/knowledge/${encodeURIComponent(ui.collection.value)}/documents`, body);
    if (!res.ok) throw await chat.errorOf(res);
    const added = await res.json();
    const doc = added.document;
    await load();
    return added.unchanged
      ? `${file.name} is already there, unchanged: nothing to do.`
      : `Added ${doc.title} (${doc.chunks} passage${doc.chunks === 1 ? "" : "s"}).`;
  }

  async function upload(event) {
    event.preventDefault();
    const file = ui.file.files && ui.file.files[0];
    if (!file || !ui.collection.value) return;
    ui.upload.disabled = true;
    say(`Adding ${file.name}…`);
    try {
      say(await add(file));
      ui.form.reset();
    } catch (err) {
      say(chat.plainError(err), true);
    } finally {
      ui.upload.disabled = false;
    }
  }

  // What the chat's attachments use (app.js): a document dropped on the chat goes to the chosen collection.
  window.yaoKnowledge = Object.freeze({
    collection: () => (shown && !ui.section.hidden && ui.collection.value
      ? ui.collection.selectedOptions[0].textContent : null),
    add,
  });

  // Filled once signed in (app.js shows the signed-in bar), emptied on sign-out.
  const watch = new MutationObserver(() => {
    const signedIn = chat.signedIn();
    if (signedIn && !shown) {
      shown = true;
      load().catch((err) => say(chat.plainError(err), true));
    } else if (!signedIn && shown) {
      shown = false;
      ui.section.hidden = true;
      say("");
    }
  });
  watch.observe($("signed-in"), { attributes: true, attributeFilter: ["hidden"] });
  if (chat.signedIn()) {
    shown = true;
    load().catch((err) => say(chat.plainError(err), true));
  }
  ui.form.addEventListener("submit", upload);
})();
