/* The colour theme, before first paint: loaded blocking in <head> (the CSP allows no inline
   script), it sets data-theme="light" | "dark" on <html> from the choice remembered in
   localStorage; with "system" (or nothing remembered) it sets nothing and the stylesheet
   follows prefers-color-scheme. Once the page is parsed it shows the header's toggle
   (#theme-choice, hidden without JavaScript) and remembers what it is set to. */
(function () {
  "use strict";
  var KEY = "sagaboard-theme";
  var CHOICES = { light: 1, dark: 1, system: 1 };

  function stored() {
    try {
      var value = window.localStorage.getItem(KEY);
      return CHOICES[value] ? value : "system";
    } catch (e) {
      return "system"; // storage refused (private mode, a policy): follow the system
    }
  }

  function apply(choice) {
    var root = document.documentElement;
    if (choice === "light" || choice === "dark") root.setAttribute("data-theme", choice);
    else root.removeAttribute("data-theme");
  }

  apply(stored());

  document.addEventListener("DOMContentLoaded", function () {
    var select = document.getElementById("theme-choice");
    if (!select) return;
    select.value = stored();
    var wrapper = select.closest(".theme-choice");
    if (wrapper) wrapper.hidden = false;
    select.addEventListener("change", function () {
      var choice = CHOICES[select.value] ? select.value : "system";
      try {
        if (choice === "system") window.localStorage.removeItem(KEY);
        else window.localStorage.setItem(KEY, choice);
      } catch (e) { /* not remembered: it still applies to this page */ }
      apply(choice);
    });
  });
  // Another tab changed it: follow.
  window.addEventListener("storage", function (e) {
    if (e.key !== KEY) return;
    apply(stored());
    var select = document.getElementById("theme-choice");
    if (select) select.value = stored();
  });
})();
