// "Copy link" and "Copy id" buttons: <button class="copy-link" data-copy-url="/path#anchor">
// copies the absolute address (this page's origin + the path); data-copy-text copies the
// text as it is. Without the clipboard API (a page served over plain http from another
// host is not a secure context), a read-only field with the text appears beside the
// button, selected, for the person to copy. One listener for the whole page, so buttons
// that a live update swaps in work too. (A static file: the CSP allows no inline script.)
(function () {
  "use strict";

  function status() {
    var el = document.getElementById("copy-status");
    if (!el) {
      el = document.createElement("span");
      el.id = "copy-status";
      el.className = "visually-hidden";
      el.setAttribute("role", "status");
      document.body.appendChild(el);
    }
    return el;
  }

  function say(button, text) {
    status().textContent = text;
    if (!button.dataset.label) button.dataset.label = button.textContent;
    button.textContent = text;
    window.setTimeout(function () { button.textContent = button.dataset.label; }, 2000);
  }

  function fallback(button, text) {
    var input = button.nextElementSibling;
    if (!input || !input.classList.contains("copy-fallback")) {
      input = document.createElement("input");
      input.type = "text";
      input.readOnly = true;
      input.className = "copy-fallback";
      input.setAttribute("aria-label", "Text to copy");
      button.insertAdjacentElement("afterend", input);
    }
    input.value = text;
    input.focus();
    input.select();
    var copied = false;
    try { copied = document.execCommand("copy"); } catch (e) { copied = false; }
    say(button, copied ? "Copied" : "Press Ctrl+C to copy");
  }

  document.addEventListener("click", function (evt) {
    var button = evt.target.closest("button.copy-link");
    if (!button) return;
    var text = button.hasAttribute("data-copy-text")
      ? button.getAttribute("data-copy-text")
      : new URL(button.getAttribute("data-copy-url"), window.location.href).href;
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(
        function () { say(button, "Copied"); },
        function () { fallback(button, text); }
      );
    } else {
      fallback(button, text);
    }
  });
})();
