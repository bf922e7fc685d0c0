// Pieces of the web chat that need nothing of its state: elements, the clipboard, an SSE reader, the
// versions of an answer and the attachments of the next message. app.js builds the page with them.
"use strict";

window.yaoParts = (() => {
  /** An element with a class and text (text always as a text node). */
  function h(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  /** Put `text` on the clipboard; where the Clipboard API is not offered (plain http), through a text field. */
  async function copyText(text) {
    if (navigator.clipboard && window.isSecureContext) {
      try {
        await navigator.clipboard.writeText(text);
        return true;
      } catch {
        // refused (no permission): the older way below may still work
      }
    }
    const area = h("textarea", "offscreen");
    area.value = text;
    area.setAttribute("readonly", "");
    document.body.append(area);
    area.select();
    let copied = false;
    try {
      copied = document.execCommand("copy");
    } catch {
      copied = false;
    }
    area.remove();
    return copied;
  }

  function copyButton(getText, label) {
    const button = h("button", "secondary small copy", "Copy");
    button.type = "button";
    button.setAttribute("aria-label", label);
    button.addEventListener("click", async () => {
      const copied = await copyText(getText());
      button.textContent = copied ? "Copied" : "Copy failed";
      clearTimeout(button.timer);
      button.timer = setTimeout(() => {
        button.textContent = "Copy";
      }, 1500);
    });
    return button;
  }

  /** Under a message: Copy, and what else can be done with it (Edit for the person's own). */
  function messageActions(getText, ...more) {
    const row = h("div", "msg-actions");
    row.append(copyButton(getText, "Copy message"), ...more.filter(Boolean));
    return row;
  }

  /** Each code block of a rendered reply gets its own Copy button. */
  function addCodeCopies(body) {
    for (const pre of body.querySelectorAll("pre")) {
      if (pre.parentElement.classList.contains("code-block")) continue;
      const block = h("div", "code-block");
      pre.replaceWith(block);
      const button = copyButton(() => pre.textContent, "Copy code");
      button.classList.add("code-copy");
      block.append(button, pre);
    }
  }

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

  /** Versions of one exchange, one shown at a time, with ‹ › to go through them. */
  class Versions {
    constructor(parent) {
      this.node = h("div", "versions");
      this.nav = h("div", "version-nav");
      this.back = h("button", "secondary small version-back", "‹");
      this.back.type = "button";
      this.back.setAttribute("aria-label", "Show the previous version");
      this.label = h("span", "version-label");
      this.forward = h("button", "secondary small version-forward", "›");
      this.forward.type = "button";
      this.forward.setAttribute("aria-label", "Show the next version");
      this.nav.append(this.back, this.label, this.forward);
      this.back.addEventListener("click", () => this.show(this.index - 1));
      this.forward.addEventListener("click", () => this.show(this.index + 1));
      this.items = [];
      this.index = 0;
      this.edits = false; // whether the versions begin with the person's message (an edit), or only answer it
      this.nested = false; // inside another version: once the new one is stored, the chat is laid out afresh
      this.node.append(this.nav);
      this.node.yaoVersions = this;
      if (parent) parent.append(this.node);
    }

    /** A new version, shown; those before it become earlier ones. */
    add() {
      for (const item of this.items) item.classList.add("earlier");
      const item = h("div", "version");
      this.items.push(item);
      this.node.append(item);
      this.show(this.items.length - 1);
      return item;
    }

    /** The newest version was not made (the server refused it): back to what was there before. */
    dropLatest() {
      this.items.pop().remove();
      const last = this.items[this.items.length - 1];
      last.classList.remove("earlier");
      if (this.items.length === 1) this.node.replaceWith(...last.childNodes);
      else this.show(this.items.length - 1);
    }

    show(index) {
      this.index = Math.max(0, Math.min(index, this.items.length - 1));
      this.items.forEach((item, i) => {
        item.hidden = i !== this.index;
      });
      const latest = this.index === this.items.length - 1;
      this.label.textContent = `Version ${this.index + 1} of ${this.items.length}${latest ? "" : " (earlier)"}`;
      this.back.disabled = this.index === 0;
      this.forward.disabled = latest;
    }
  }

  const IMAGE_LIMIT = 5 * 1024 * 1024; // a data: URL grows by a third; larger pictures are refused here
  const DOCUMENT = /\.(md|markdown|txt|html?|pdf)$/i;

  function readAsDataUrl(file) {
    return new Promise((resolve, reject) => {
      const reader = new FileReader();
      reader.onload = () => resolve(String(reader.result));
      reader.onerror = () => reject(reader.error || new Error(`${file.name} could not be read`));
      reader.readAsDataURL(file);
    });
  }

  /** What goes with the next message: images, sent in it (a model that cannot read images refuses them);
   *  documents, added to the team's knowledge (the Knowledge section's collection), found by its search.
   *  Picked with the Attach button, dropped on the conversation, or pasted into the message field. */
  class Attachments {
    constructor(ui, plainError) {
      this.ui = ui; // the page's composer, message field and transcript
      this.plainError = plainError; // an error in words for people (app.js)
      this.images = []; // {name, url}
      this.list = h("ul", "attachments");
      this.list.setAttribute("aria-label", "Attached images");
      this.list.hidden = true;
      this.status = h("p", "attach-status");
      this.status.setAttribute("role", "status");
      this.input = h("input", "attach-input");
      this.input.type = "file";
      this.input.multiple = true;
      this.input.accept = "image/*,.md,.markdown,.txt,.html,.htm,.pdf";
      this.input.hidden = true;
      this.button = h("button", "secondary attach", "Attach");
      this.button.type = "button";
      this.button.setAttribute("aria-label", "Attach images or documents");
      const actions = this.ui.composer.querySelector(".composer-actions");
      actions.prepend(this.button, this.input);
      actions.before(this.list, this.status);
      this.wire();
    }

    wire() {
      this.button.addEventListener("click", () => this.input.click());
      this.input.addEventListener("change", () => {
        this.add([...this.input.files]);
        this.input.value = "";
      });
      this.ui.message.addEventListener("paste", (event) => {
        const files = [...((event.clipboardData && event.clipboardData.files) || [])];
        if (!files.length) return;
        event.preventDefault();
        this.add(files);
      });
      const area = this.ui.transcript.closest("main") || this.ui.composer;
      const carriesFiles = (event) => event.dataTransfer && [...event.dataTransfer.types].includes("Files");
      area.addEventListener("dragover", (event) => {
        if (!carriesFiles(event) || this.button.disabled) return;
        event.preventDefault();
        area.classList.add("dropping");
      });
      area.addEventListener("dragleave", () => area.classList.remove("dropping"));
      area.addEventListener("drop", (event) => {
        area.classList.remove("dropping");
        if (!carriesFiles(event)) return;
        event.preventDefault();
        if (!this.button.disabled) this.add([...event.dataTransfer.files]);
      });
    }

    sync(disabled) {
      this.button.disabled = disabled;
    }

    say(text, failed = false) {
      this.status.textContent = text;
      this.status.classList.toggle("failed", failed);
    }

    async add(files) {
      for (const file of files) {
        if (file.type.startsWith("image/")) await this.image(file);
        else if (DOCUMENT.test(file.name)) await this.document(file);
        else this.say(`${file.name}: only images and documents (.md, .txt, .html, .pdf) can be attached.`, true);
      }
    }

    async image(file) {
      if (file.size > IMAGE_LIMIT) {
        this.say(`${file.name} is larger than ${IMAGE_LIMIT / 1024 / 1024} MB: make it smaller, then attach it.`, true);
        return;
      }
      try {
        this.images.push({ name: file.name || "pasted image", url: await readAsDataUrl(file) });
      } catch (err) {
        this.say(this.plainError(err), true);
        return;
      }
      this.render();
      this.say(`${file.name || "The image"} goes with your next message.`);
    }

    async document(file) {
      const knowledge = window.yaoKnowledge;
      const collection = knowledge && knowledge.collection();
      if (!collection) {
        this.say(`${file.name}: documents are added to a knowledge collection, and none is open to you here.`, true);
        return;
      }
      this.say(`Adding ${file.name} to ${collection}…`);
      try {
        this.say(`${await knowledge.add(file)} The assistant finds it when it searches that knowledge.`);
      } catch (err) {
        this.say(`${file.name} was not added: ${this.plainError(err)}`, true);
      }
    }

    render() {
      this.list.replaceChildren(...this.images.map((image, i) => {
        const item = h("li", "attachment");
        const thumb = h("img", "attachment-thumb");
        thumb.src = image.url;
        thumb.alt = image.name;
        const remove = h("button", "secondary small", "Remove");
        remove.type = "button";
        remove.setAttribute("aria-label", `Remove ${image.name}`);
        remove.addEventListener("click", () => {
          this.images.splice(i, 1);
          this.render();
          this.ui.message.focus();
        });
        item.append(thumb, h("span", "attachment-name", image.name), remove);
        return item;
      }));
      this.list.hidden = !this.images.length;
    }

    /** The message's content: its text alone, or text and images as parts. */
    content(text) {
      if (!this.images.length) return text;
      const parts = text ? [{ type: "text", text }] : [];
      return [...parts, ...this.images.map((image) => ({ type: "image_url", image_url: { url: image.url } }))];
    }

    clear() {
      this.images = [];
      this.render();
      this.say("");
    }
  }

  return Object.freeze({ h, copyText, copyButton, messageActions, addCodeCopies, sseEvents, Versions, Attachments });
})();
