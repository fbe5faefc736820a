// Copy buttons of the JSON trees (README "Reading payloads"): a button's data-copy holds
// the path (input.items[2].sku) or the value it copies. navigator.clipboard where the
// page may use it (https, localhost), else a hidden textarea and execCommand("copy").
// The button says "copied" for a moment (and a polite live region tells a screen reader).
// One listener on the document: trees that htmx or the live feed swap in work too.
(function () {
  "use strict";

  function fallback(text) {
    var area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.className = "jt-offscreen";
    document.body.appendChild(area);
    area.select();
    var ok = false;
    try { ok = document.execCommand("copy"); } catch (e) { ok = false; }
    document.body.removeChild(area);
    return ok ? Promise.resolve() : Promise.reject(new Error("copy refused"));
  }

  function copy(text) {
    if (navigator.clipboard && window.isSecureContext) {
      return navigator.clipboard.writeText(text).catch(function () { return fallback(text); });
    }
    return fallback(text);
  }

  function announce(button, said) {
    var status = document.getElementById("jt-status");
    if (!status) {
      status = document.createElement("span");
      status.id = "jt-status";
      status.className = "jt-offscreen";
      status.setAttribute("role", "status");
      document.body.appendChild(status);
    }
    status.textContent = said;
    var label = button.textContent;
    if (button.getAttribute("data-label") === null) { button.setAttribute("data-label", label); }
    button.textContent = said.indexOf("Copied") === 0 ? "copied" : "not copied";
    window.setTimeout(function () { button.textContent = button.getAttribute("data-label"); }, 1500);
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("button.jt-copy[data-copy]");
    if (!button) { return; }
    event.preventDefault(); // inside a <summary>: copy, do not fold the node
    var what = button.getAttribute("data-copy-what") || "value";
    copy(button.getAttribute("data-copy")).then(
      function () { announce(button, "Copied the " + what + "."); },
      function () { announce(button, "Could not copy the " + what + "."); }
    );
  });
})();
