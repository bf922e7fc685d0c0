// The chat list as a drawer on a phone: hidden until the menu button opens it, over the conversation, which
// keeps the whole width. Only the page's markup is used (stable ids), never app.js's internals, so either
// can change without the other. On a wider screen the list is a column and none of this applies.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const toggle = $("chats-toggle");
  const drawer = $("chat-drawer");
  const close = $("chats-close");
  const backdrop = $("drawer-backdrop");
  const chats = $("chats");
  const newChat = $("new-chat");
  if (!toggle || !drawer || !close || !backdrop) return;

  // The same width as style.css's phone layout: the two must agree on when the list is a drawer.
  const phone = window.matchMedia("(max-width: 720px)");
  const FOCUSABLE = "a[href], button, input, select, textarea, summary, [tabindex]";
  let blocked = []; // the elements this script made inert while the drawer is open (and only those)

  const isOpen = () => drawer.classList.contains("open");

  /** Whether `node` can take the focus now: shown, enabled, not taken out of the Tab order. */
  function focusable(node) {
    return !node.disabled && node.tabIndex >= 0 && node.getClientRects().length > 0;
  }

  function open() {
    if (!phone.matches || isOpen()) return;
    drawer.classList.add("open");
    backdrop.hidden = false;
    toggle.setAttribute("aria-expanded", "true");
    // A modal panel while open: announced as a dialog, and the rest of the page out of reach (inert) so
    // Tab stays in the drawer and a screen reader does not wander into the conversation behind it.
    drawer.setAttribute("role", "dialog");
    drawer.setAttribute("aria-modal", "true");
    blocked = [];
    for (let node = drawer; node && node !== document.body; node = node.parentElement) {
      for (const sibling of node.parentElement.children) {
        if (sibling === node || sibling === backdrop || sibling.inert || sibling.tagName === "SCRIPT") continue;
        sibling.inert = true;
        blocked.push(sibling);
      }
    }
    const first = [...drawer.querySelectorAll(FOCUSABLE)].find(focusable);
    (first || close).focus();
  }

  /** Close the drawer; the focus goes back to the menu button unless something else has taken it meanwhile
   *  (app.js puts it in the message box after "New chat"). */
  function shut() {
    if (!isOpen()) return;
    drawer.classList.remove("open");
    backdrop.hidden = true;
    toggle.setAttribute("aria-expanded", "false");
    drawer.setAttribute("role", "complementary");
    drawer.removeAttribute("aria-modal");
    for (const node of blocked) node.inert = false;
    blocked = [];
    const active = document.activeElement;
    if (phone.matches && (!active || active === document.body || drawer.contains(active))) toggle.focus();
  }

  toggle.addEventListener("click", () => (isOpen() ? shut() : open()));
  close.addEventListener("click", shut);
  backdrop.addEventListener("click", shut);
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && isOpen()) {
      event.preventDefault();
      shut();
    }
  });
  // Choosing a chat, or "New chat", is what the drawer was opened for: it closes. In the capture phase,
  // before app.js's own handler, so the conversation is no longer inert when app.js focuses the message box.
  drawer.addEventListener(
    "click",
    (event) => {
      const button = event.target instanceof Element && event.target.closest("button");
      if (button && ((chats && chats.contains(button)) || button === newChat)) shut();
    },
    true,
  );
  // Wider than a phone (a turned tablet, a resized window): the list is a column again, nothing is modal.
  phone.addEventListener("change", () => {
    if (!phone.matches) shut();
  });
})();
