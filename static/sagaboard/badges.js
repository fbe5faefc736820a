// The navigation's counts (#nav-badges, /inbox/badges/): htmx polls them every 30 s; a live
// update on this page (any websocket message) asks again at once, then at most once every
// 2 s (a busy stream of updates costs one small request per 2 s, not one per message). When a count of
// something for this person grows and they turned notifications on (the inbox's button,
// remembered in this browser), the browser's Notification API tells them.
(function () {
  "use strict";
  var KEY = "sagaboard.notify";
  var WORDS = {  // [one, more]
    approvals: ["approval waits for your vote", "approvals wait for your vote"],
    failures: ["failed undo waits for an operator", "failed undos wait for an operator"],
    assigned: ["saga assigned to you needs you", "sagas assigned to you need you"],
  };
  var resting = false;
  var again = false;
  var last = null;

  // At once on the first live update, then at most once per 2 s while more arrive (the last
  // one always gets its refresh).
  function refreshSoon() {
    if (resting) { again = true; return; }
    document.body.dispatchEvent(new CustomEvent("badges-refresh"));
    resting = true;
    setTimeout(function () {
      resting = false;
      if (again) { again = false; refreshSoon(); }
    }, 2000);
  }

  function counts(el) {
    var found = {};
    Object.keys(WORDS).forEach(function (k) { found[k] = parseInt(el.dataset[k] || "0", 10); });
    return found;
  }

  function notify(now) {
    if (last === null) { last = now; return; }
    var grown = Object.keys(WORDS).filter(function (k) { return now[k] > last[k]; });
    last = now;
    if (!grown.length || localStorage.getItem(KEY) !== "on") return;
    if (!("Notification" in window) || Notification.permission !== "granted") return;
    var body = grown.map(function (k) {
      return now[k] + " " + WORDS[k][now[k] === 1 ? 0 : 1];
    }).join("; ");
    var shown = new Notification("Sagaboard", { body: body, tag: "sagaboard-inbox" });
    shown.onclick = function () { window.focus(); window.location.href = "/inbox/"; };
  }

  document.addEventListener("htmx:wsAfterMessage", refreshSoon);
  document.addEventListener("htmx:afterSwap", function (evt) {
    if (evt.target && evt.target.id === "nav-badges") {
      var el = evt.target.querySelector(".nav-badges");
      if (el) notify(counts(el));
    }
  });

  // The inbox's opt-in: ask the browser once, remember the choice here.
  document.addEventListener("DOMContentLoaded", function () {
    var button = document.getElementById("notify-on");
    var state = document.getElementById("notify-state");
    if (!button || !("Notification" in window)) return;
    button.parentElement.hidden = false;
    function say() {
      var on = localStorage.getItem(KEY) === "on" && Notification.permission === "granted";
      button.textContent = on ? "Stop notifying me in this browser" : "Notify me in this browser";
      state.textContent = Notification.permission === "denied"
        ? "This browser blocks notifications from this site."
        : (on ? "On: you hear of new approvals, failed undos and assignments." : "");
    }
    button.addEventListener("click", function () {
      if (localStorage.getItem(KEY) === "on") { localStorage.removeItem(KEY); say(); return; }
      Notification.requestPermission().then(function (answer) {
        if (answer === "granted") localStorage.setItem(KEY, "on");
        say();
      });
    });
    say();
  });
})();
