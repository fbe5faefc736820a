// Work queues (approvals, failed undos): confirmations, the approve / reject dialog of the
// keys a and r (keys.js holds every shortcut), empty notes.
// A static file: no inline script anywhere (a strict CSP stays possible).
(function () {
  // The approve / reject dialog. keys.js sends "sagaboard:keyconfirm" for a / r on an
  // approval (its buttons carry data-key-dialog); no key decides (OPERATOR_UX 4.8): the
  // dialog shows the item, what its undo runs and the reason, and only its own button
  // goes on, by clicking the item's button (the same htmx form as a click on the page).
  var dialog = document.getElementById("decide-dialog");
  var asked = null; // {item: the approval's element id, value: "approve" or "reject"}

  function copyOf(node) {
    var copy = node.cloneNode(true);
    copy.removeAttribute("id");
    copy.removeAttribute("role");
    Array.prototype.forEach.call(copy.querySelectorAll("[id]"), function (el) { el.removeAttribute("id"); });
    return copy;
  }

  // The item's header as one line (not a <header>: in a dialog it would be a banner).
  function summary(item) {
    var line = document.createElement("p");
    Array.prototype.forEach.call(item.querySelector("header").childNodes, function (node) {
      if (node.nodeType === 1 && node.matches("input, .permalink")) return;
      line.appendChild(node.nodeType === 1 ? copyOf(node) : node.cloneNode(true));
    });
    return line;
  }

  function ask(item, button) {
    var value = button.value;
    asked = { item: item.id, value: value };
    dialog.querySelector("h2").textContent = value === "approve" ? "Approve this undo?" : "Reject this undo?";
    var what = dialog.querySelector(".decide-what");
    what.replaceChildren(summary(item));
    [".runs", ".cannot-run"].forEach(function (selector) {
      var part = item.querySelector(selector);
      if (part) what.appendChild(copyOf(part));
    });
    var go = dialog.querySelector("button.decide-go");
    go.textContent = button.textContent.trim();
    go.className = "decide-go " + (value === "approve" ? "approve" : "reject");
    var reason = dialog.querySelector("input[name=reason]");
    var typed = item.querySelector("input[name=reason]");
    reason.value = typed ? typed.value : "";
    dialog.querySelector("[data-enter-hint]").textContent = "";
    dialog.returnValue = "";
    dialog.showModal();
    reason.focus();
  }

  function answered() {
    var item = asked && document.getElementById(asked.item);
    var reason = dialog.querySelector("input[name=reason]").value;
    var typed = item && item.querySelector("input[name=reason]");
    if (typed) typed.value = reason; // what was typed stays, decided or not
    if (dialog.returnValue === "decide" && asked) {
      var button = item && item.querySelector("form.decide button[value=" + asked.value + "]");
      if (button) button.click();
      else {
        var flash = document.getElementById("flash");
        flash.textContent = "That approval is no longer waiting: nothing was decided.";
        flash.className = "message info";
        flash.setAttribute("role", "status");
        flash.hidden = false;
      }
    }
    if (item) item.focus();
    asked = null;
  }

  if (dialog) {
    document.addEventListener("sagaboard:keyconfirm", function (e) {
      var item = e.target.closest("li.approval");
      if (!item || dialog.open) return;
      e.preventDefault();
      ask(item, e.target);
    });
    dialog.addEventListener("close", answered);
  }

  // Confirm before state-changing bulk or irreversible actions; say how many it covers.
  // On submit, not on click: the browser checks the form first (a reason the action needs
  // is `required` on its field; a button that needs none, as a retry, is `formnovalidate`),
  // so a missing reason is said before any dialog, and only a valid form asks to confirm.
  // Capturing, on the document: before htmx's own listener on the form sends it.
  document.addEventListener("submit", function (e) {
    var button = e.submitter;
    if (!button || !button.matches("button[data-confirm], button[data-confirm-count]")) return;
    var message = button.dataset.confirm;
    if (button.dataset.confirmCount) {
      var form = button.form;
      var n = document.querySelectorAll("input[type=checkbox][form=" + form.id + "]:checked").length;
      message = button.dataset.confirmCount + " (" + n + " selected)";
      var expected = form.querySelector("input[name=expected]");
      if (!expected) { expected = document.createElement("input"); expected.type = "hidden"; expected.name = "expected"; form.appendChild(expected); }
      expected.value = String(n);
    }
    if (!window.confirm(message)) { e.preventDefault(); e.stopImmediatePropagation(); }
  }, true);

  // A retry or resolve that was only requested when its answer came says so, and names
  // where its message is read again (data-follow: sagaboard.actions.pages.queue_pages.step_outcome).
  // It is asked again as it arrives (the undo may have run, or failed, before the answer
  // reached the page) and whenever a live update re-renders what the page shows, until the
  // answer is the outcome ("Retry failed: ..."), which follows nothing more. One request at
  // a time (one more after it if updates came meanwhile); a message something else wrote
  // over meanwhile is left alone.
  var following = false;
  var followAgain = false;
  function follow() {
    var flash = document.getElementById("flash");
    var url = flash && flash.dataset.follow;
    if (!url) return;
    if (following) { followAgain = true; return; }
    following = true;
    var shown = flash.textContent;
    fetch(url, { headers: { "HX-Request": "true" }, credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        var now = document.getElementById("flash");
        if (!html || !now || now.dataset.follow !== url || now.textContent !== shown) return;
        // Parsed as a document of its own (inert: no script runs, nothing is inserted
        // but the one element, which the server's template escaped).
        var parsed = new DOMParser().parseFromString(html, "text/html");
        var fresh = parsed.getElementById("flash");
        if (!fresh) return;
        fresh.removeAttribute("hx-swap-oob");
        now.replaceWith(fresh);
      })
      .catch(function () { /* a blink of the network: the next update asks again */ })
      .then(function () {
        following = false;
        if (followAgain) { followAgain = false; follow(); }
      });
  }
  document.addEventListener("htmx:oobAfterSwap", function () {
    var flash = document.getElementById("flash");
    if (!flash || !flash.dataset.follow) return;
    follow(); // the answer itself just arrived, or a live update of the page did
  });

  // Keep one copy of each live item, say when the queue is empty, and keep the count true.
  function refreshEmpty() {
    var list = document.getElementById("approval-items");
    if (!list) return;
    var seen = {};
    Array.prototype.forEach.call(list.querySelectorAll("li.approval"), function (item) {
      if (seen[item.id]) item.remove(); else seen[item.id] = true;
    });
    var n = list.querySelectorAll("li.approval").length;
    var note = document.getElementById("no-approvals");
    if (note) note.hidden = n > 0;
    var count = document.getElementById("approval-count");
    if (count) count.textContent = String(n);
  }
  document.addEventListener("DOMContentLoaded", refreshEmpty);
  document.addEventListener("htmx:oobAfterSwap", refreshEmpty);
  document.addEventListener("htmx:afterSwap", refreshEmpty);
})();
