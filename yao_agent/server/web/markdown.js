// Assistant replies as markdown, made safe: marked turns the text into HTML, DOMPurify keeps only inert
// markup, highlight.js colours fenced code. The text comes from a model, which may repeat whatever a tool
// or a web page fed it, so it is treated as hostile:
//   - raw HTML in the text is shown as text, never parsed (a reply can talk about <script> tags);
//   - images become links, so that a reply cannot make the browser fetch an address on its own
//     (an image URL can carry the conversation out to whoever owns it);
//   - links open in a new tab without a referrer; javascript: and other script URLs are dropped;
//   - what marked outputs still goes through DOMPurify, in case a parsing quirk lets markup through.
// Without the vendor files (a broken install), replies are shown as plain text.
"use strict";

window.yaoMarkdown = (() => {
  const { marked, DOMPurify, hljs } = window;
  if (!marked || !DOMPurify) return null;

  const escapeHtml = (text) =>
    String(text).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);

  const parser = new marked.Marked({ gfm: true, breaks: true });
  parser.use({
    renderer: {
      html(token) {
        const shown = escapeHtml(token.text);
        return token.block ? `<p>${shown}</p>` : shown;
      },
      image(token) {
        const label = token.text ? `image: ${token.text}` : "image";
        return `<a href="${escapeHtml(token.href)}">${escapeHtml(label)}</a>`;
      },
      checkbox(token) {
        return token.checked ? "☑ " : "☐ ";
      },
    },
  });

  const PURIFY = {
    USE_PROFILES: { html: true },
    FORBID_TAGS: ["style", "img", "svg", "math", "form", "input", "button", "textarea", "select", "iframe", "video", "audio"],
    FORBID_ATTR: ["style", "id", "name"],
    RETURN_DOM_FRAGMENT: true,
  };
  DOMPurify.addHook("afterSanitizeAttributes", (node) => {
    if (node.tagName === "A" && node.hasAttribute("href")) {
      node.setAttribute("target", "_blank");
      node.setAttribute("rel", "noopener noreferrer nofollow");
    }
  });
  if (hljs) hljs.configure({ ignoreUnescapedHTML: true });

  /** Colour the fenced code blocks that name a language highlight.js knows (others stay plain). */
  function highlight(root) {
    if (!hljs) return;
    for (const code of root.querySelectorAll("pre > code[class*='language-']")) {
      const match = /language-([\w+#-]+)/.exec(code.className);
      if (match && hljs.getLanguage(match[1])) hljs.highlightElement(code);
    }
  }

  /** Replace what `node` shows with `text` rendered as markdown. */
  function render(node, text) {
    const fragment = DOMPurify.sanitize(parser.parse(String(text ?? "")), PURIFY);
    highlight(fragment);
    node.replaceChildren(fragment);
  }

  return { render };
})();
