// Keyboard shortcuts, one module for every page (README "Keyboard shortcuts"; OPERATOR_UX
// 4.8). The templates say what each key does, this file only follows them:
//
// - rows a list lets you walk carry data-key-row (approval and failure cards, a saga's
//   step cards), or sit in a table body marked data-key-rows (the saga list); j / k move the current-row marker (focus, the class
//   key-current and aria-current), o or Enter opens the row, "." jumps to the next row
//   marked data-key-failed (on a page whose list says data-key-failures);
// - a control with aria-keyshortcuts="x" is what the key x triggers: in the current row
//   first (x ticks its checkbox), else on the page (/ focuses the search box, c clicks
//   "Copy id", ? the shortcuts button). A text field is focused, a control with
//   data-key-dialog gets a "sagaboard:keyconfirm" event (queue.js opens its dialog; no key
//   ever decides), anything else is clicked;
// - g then a letter follows the help dialog's link with data-key-go="letter"; / on a page
//   without a search follows its data-key-search link (the saga list, search focused).
//
// No key does anything while the focus is in a field (input, textarea, select, editable
// text) or with Ctrl, Alt or Meta held, nor while a modal dialog is open. Esc leaves a
// field. Enter in a decision form never submits it (the form's disabled first button
// sees to that, templates/sagaboard/_enter_guard.html): the page says which button to click.
// Live updates swap rows in and out; the marker finds its row again by id (or the row now
// in its place). (A static file: the CSP allows no inline script.)
(function () {
  "use strict";

  // A row: marked so, or a table row of a list marked data-key-rows that has a link to open
  // (not the "No sagas match" row, nor one a live update hid).
  var ROW = "[data-key-row], [data-key-rows] > tr:has([aria-keyshortcuts~='o'])";
  var GO_WAIT_MS = 1500;
  var marked = null; // the current row
  var markedId = ""; // its id: a live update may replace the element by one with the same id
  var markedAt = -1; // its place among the rows, for when it left the page
  var focusInRow = false; // the focus was in the current row (a live swap drops it)
  var goUntil = 0; // a "g" waits for its letter until then
  var goTimer = 0;

  function visible(el) { return el.getClientRects().length > 0; }

  function rows() { return Array.prototype.filter.call(document.querySelectorAll(ROW), visible); }

  function typing(el) {
    return !!el && (el.isContentEditable || (el.matches && el.matches("input, textarea, select")));
  }

  function mark(row) {
    if (marked && marked !== row) {
      marked.classList.remove("key-current");
      marked.removeAttribute("aria-current");
    }
    marked = row;
    markedId = row ? row.id : "";
    if (!row) return;
    markedAt = rows().indexOf(row);
    row.classList.add("key-current");
    row.setAttribute("aria-current", "true");
  }

  function current() { return marked && marked.isConnected ? marked : null; }

  function focusRow(row) {
    mark(row);
    if (!row.hasAttribute("tabindex")) row.tabIndex = -1; // focusable by script, not by Tab
    row.focus({ preventScroll: true });
    row.scrollIntoView({ block: "nearest" });
  }

  function move(step) {
    var all = rows();
    if (!all.length) return;
    var at = all.indexOf(current());
    focusRow(all[Math.max(0, Math.min(all.length - 1, at + step))] || all[0]);
  }

  // The row a live update took away: its new copy (same id), or the row now in its place.
  function refind() {
    if (!marked || marked.isConnected) return;
    var again = markedId ? document.getElementById(markedId) : null;
    if (!again || !again.matches(ROW) || !visible(again)) {
      var all = rows();
      again = all.length ? all[Math.max(0, Math.min(markedAt, all.length - 1))] : null;
    }
    var lost = !document.activeElement || document.activeElement === document.body;
    var refocus = focusInRow && lost;
    marked = null;
    mark(again);
    if (again && refocus) {
      if (!again.hasAttribute("tabindex")) again.tabIndex = -1;
      again.focus({ preventScroll: true });
    }
  }

  function say(text) {
    var flash = document.getElementById("flash");
    if (!flash) return;
    flash.textContent = text;
    flash.className = "message info";
    flash.setAttribute("role", "status");
    flash.hidden = false;
  }

  function usable(el) { return !el.disabled && visible(el) && !el.closest("dialog:not([open])"); }

  // The control a key triggers: the current row's, else the page's (outside every row).
  function control(key) {
    var selector = '[aria-keyshortcuts~="' + CSS.escape(key) + '"]';
    var row = current();
    var found = row ? Array.prototype.find.call(row.querySelectorAll(selector), usable) : null;
    return found || Array.prototype.find.call(document.querySelectorAll(selector), function (el) {
      return usable(el) && !el.closest(ROW);
    }) || null;
  }

  function trigger(el) {
    if (typing(el) && !el.matches("input[type=checkbox], input[type=radio]")) {
      el.focus();
      if (el.select) el.select();
    } else if (el.hasAttribute("data-key-dialog")) {
      // Never the decision itself: whoever owns the dialog opens it (queue.js).
      el.dispatchEvent(new CustomEvent("sagaboard:keyconfirm", { bubbles: true, cancelable: true }));
    } else {
      el.click();
    }
  }

  // o / Enter: a row's link marked for "o" (its saga), or a step card's details, folded
  // open (or shut again), with the address made the step's permalink.
  function open(row) {
    if (!row) return;
    var link = row.querySelector('[aria-keyshortcuts~="o"]');
    if (link) { link.click(); return; }
    var details = row.querySelectorAll("details");
    var shut = Array.prototype.some.call(details, function (d) { return !d.open; });
    Array.prototype.forEach.call(details, function (d) { d.open = shut; });
    if (row.id) window.history.replaceState(window.history.state, "", "#" + row.id);
  }

  function nextFailed() {
    var all = rows();
    var at = all.indexOf(current());
    for (var n = 1; n <= all.length; n += 1) {
      var row = all[(at + n + all.length) % all.length];
      if (row.hasAttribute("data-key-failed")) { focusRow(row); return; }
    }
    say("No failed step on this page.");
  }

  function pending(text) {
    var status = document.getElementById("key-pending");
    if (status) status.textContent = text;
  }

  function waitForLetter() {
    goUntil = Date.now() + GO_WAIT_MS;
    pending("g: then a letter (? lists them)");
    window.clearTimeout(goTimer);
    goTimer = window.setTimeout(function () { goUntil = 0; pending(""); }, GO_WAIT_MS);
  }

  function stopWaiting() {
    goUntil = 0;
    window.clearTimeout(goTimer);
    pending("");
  }

  // The letter after "g": its page, or nothing (a "g" never lets the next key through).
  function go(key) {
    var link = document.querySelector('#keys-help a[data-key-go="' + CSS.escape(key) + '"]');
    if (link) link.click();
    return !!link;
  }

  // The names of a decision form's buttons, for "Enter does not decide: click ...".
  function enterHint(form) {
    var names = Array.prototype.map.call(
      form.querySelectorAll("button[type=submit]:not(.enter-guard):not([value=cancel])"),
      function (b) { return "\u201c" + b.textContent.trim() + "\u201d"; });
    var text = "Enter does not decide: click " + names.join(" or ") + ".";
    var own = form.querySelector("[data-enter-hint]"); // inside a dialog: the page is behind it
    if (own) own.textContent = text; else say(text);
  }

  function whileTyping(e) {
    var field = e.target;
    if (e.key === "Enter" && field.form && field.form.querySelector("button.enter-guard")) {
      e.preventDefault();
      enterHint(field.form);
    } else if (e.key === "Escape" && !field.closest("dialog[open]") && !field.matches("select")) {
      var row = field.closest(ROW);
      e.preventDefault(); // a search box would clear itself: leave the text as typed
      if (row) focusRow(row); else field.blur();
    }
  }

  function onKey(e) {
    var key = e.key;
    if (key === "g") { waitForLetter(); return true; }
    if (key === "j") { move(1); return true; }
    if (key === "k") { move(-1); return true; }
    if (key === "o") { open(current()); return true; }
    if (key === "Enter") {
      // On the row itself (or nothing focused): a link or button keeps its own Enter.
      var onRow = e.target === current() || e.target === document.body;
      if (onRow && current()) { open(current()); return true; }
      return false;
    }
    if (key === "." && document.querySelector("[data-key-failures]")) { nextFailed(); return true; }
    if (key === "Escape") {
      if (current()) focusRow(current());
      return false;
    }
    if (key.length !== 1) return false;
    var el = control(key);
    if (!el && key === "/") el = document.querySelector("#keys-help a[data-key-search]");
    if (!el) return false;
    trigger(el);
    return true;
  }

  document.addEventListener("keydown", function (e) {
    if (e.defaultPrevented || e.isComposing) return;
    if (typing(e.target)) { whileTyping(e); return; }
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    if (document.querySelector("dialog[open]")) return; // a modal dialog holds the keys
    if (goUntil) {
      var waiting = Date.now() <= goUntil;
      stopWaiting();
      if (waiting) { if (go(e.key)) e.preventDefault(); return; }
    }
    if (onKey(e)) e.preventDefault();
  });

  // The marker follows the focus into a row (a click, Tab, Esc from one of its fields).
  document.addEventListener("focusin", function (e) {
    var row = e.target.closest ? e.target.closest(ROW) : null;
    if (row) mark(row);
    focusInRow = !!row;
  });

  new MutationObserver(function () { if (marked && !marked.isConnected) refind(); })
    .observe(document.body, { childList: true, subtree: true });

  // The shortcuts dialog: the footer's button or ?; Esc or "Close" shuts it and the focus
  // goes back where it was.
  var help = document.getElementById("keys-help");
  var opener = null;
  document.addEventListener("click", function (e) {
    var button = e.target.closest && e.target.closest("[data-key-help]");
    if (!button || !help || help.open) return;
    opener = document.activeElement; // the row or field the ? came from, or this button
    help.showModal();
  });
  if (help) {
    help.addEventListener("close", function () {
      if (opener && opener.isConnected && opener !== document.body) opener.focus({ preventScroll: true });
      opener = null;
    });
  }
  Array.prototype.forEach.call(document.querySelectorAll("[data-keys-hint]"), function (el) { el.hidden = false; });

  // Arrived from "/" on another page (the saga list's address ends with #search-q).
  var wanted = null;
  try { wanted = document.getElementById(decodeURIComponent(window.location.hash.slice(1))); } catch (err) { wanted = null; }
  if (wanted && wanted.matches('[aria-keyshortcuts~="/"]')) wanted.focus();
})();
