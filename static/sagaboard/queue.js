// Work queues (approvals, failed undos): confirmations, keyboard shortcuts, empty notes.
// A static file: no inline script anywhere (a strict CSP stays possible).
(function () {
  function items() { return Array.prototype.slice.call(document.querySelectorAll("li.approval, li.failure")); }

  function current() {
    var el = document.activeElement;
    return el && el.closest ? el.closest("li.approval, li.failure") : null;
  }

  function move(step) {
    var all = items();
    if (!all.length) return;
    var at = all.indexOf(current());
    var next = all[Math.max(0, Math.min(all.length - 1, at + step))] || all[0];
    next.focus();
    next.scrollIntoView({ block: "nearest" });
  }

  function decide(item, value) {
    var form = item.querySelector("form");
    if (!form) return;
    var reason = form.querySelector("input[name=reason]");
    var button = form.querySelector("button[value=" + value + "]");
    if (!button) return;
    if (reason && reason.required && !reason.value.trim()) { reason.focus(); reason.reportValidity(); return; }
    button.click();
  }

  function enterHint(form) {
    var flash = document.getElementById("flash");
    if (!flash) return;
    var names = Array.prototype.map.call(
      form.querySelectorAll("button[type=submit]:not(.enter-guard)"),
      function (b) { return "\u201c" + b.textContent.trim() + "\u201d"; });
    flash.textContent = "Enter does not decide: click " + names.join(" or ") + ".";
    flash.className = "message info";
    flash.setAttribute("role", "status");
    flash.hidden = false;
  }

  document.addEventListener("keydown", function (e) {
    var typing = e.target.matches && e.target.matches("input, textarea, select");
    if (typing && e.key !== "Escape") {
      // Enter never decides: a decision form's first submit button is a disabled guard
      // (templates/sagaboard/_enter_guard.html), so the browser submits nothing; say so.
      if (e.key === "Enter" && e.target.form && e.target.form.querySelector("button.enter-guard")) {
        e.preventDefault();
        enterHint(e.target.form);
      }
      return;
    }
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    var item = current();
    if (e.key === "j") { move(1); e.preventDefault(); }
    else if (e.key === "k") { move(-1); e.preventDefault(); }
    else if (e.key === "Escape") { if (item) item.focus(); }
    else if (e.key === "/") { var r = document.querySelector("form.bulk input[name=reason]"); if (r) { r.focus(); e.preventDefault(); } }
    else if (item && e.key === "x") { var box = item.querySelector("input[type=checkbox]"); if (box) box.click(); }
    else if (item && e.key === "a") { decide(item, "approve"); e.preventDefault(); }
    else if (item && e.key === "r") { decide(item, "reject"); e.preventDefault(); }
  });

  // Confirm before state-changing bulk or irreversible actions; say how many it covers.
  document.addEventListener("click", function (e) {
    var button = e.target.closest && e.target.closest("button[data-confirm], button[data-confirm-count]");
    if (!button) return;
    var message = button.dataset.confirm;
    if (button.dataset.confirmCount) {
      var form = button.form;
      var n = document.querySelectorAll("input[type=checkbox][form=" + form.id + "]:checked").length;
      message = button.dataset.confirmCount + " (" + n + " selected)";
      var expected = form.querySelector("input[name=expected]");
      if (!expected) { expected = document.createElement("input"); expected.type = "hidden"; expected.name = "expected"; form.appendChild(expected); }
      expected.value = String(n);
    }
    if (!window.confirm(message)) { e.preventDefault(); e.stopPropagation(); }
  }, true);

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
