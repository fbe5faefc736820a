// Times people trust (README "Times"). The server writes every time as
// <time datetime="...Z" data-when="relative|exact"> with the exact UTC text
// ({% when %}, sagaboard/ui/templatetags/sagaboard_time.py). This shows each in the zone
// the reader chose (UTC or their own: the header's toggle, kept in localStorage and in a
// cookie so the server's next page starts with it), "3 min ago" as the text of a
// relative one, and the exact time in its .when-detail (shown on hover and focus, and
// the <time>'s aria-describedby). It runs again on whatever htmx or the live feed swaps
// in (a MutationObserver, plus htmx's own events), and every 30 s for "ago".
(function () {
  "use strict";
  var KEY = "sagaboard.tz";
  var COOKIE = "sagaboard_tz";
  var ZONES = ["utc", "local"];
  var counter = 0;

  function stored() {
    var value = null;
    try { value = window.localStorage.getItem(KEY); } catch (e) { value = null; }
    if (ZONES.indexOf(value) < 0) {
      var match = document.cookie.match(/(?:^|;\s*)sagaboard_tz=(utc|local)/);
      value = match ? match[1] : document.documentElement.getAttribute("data-tz");
    }
    return ZONES.indexOf(value) < 0 ? "utc" : value;
  }

  function remember(zone) {
    try { window.localStorage.setItem(KEY, zone); } catch (e) { /* private mode: the cookie */ }
    var secure = window.location.protocol === "https:" ? "; Secure" : "";
    document.cookie = COOKIE + "=" + zone + "; Path=/; Max-Age=31536000; SameSite=Lax" + secure;
  }

  function pad(n, width) {
    var s = String(n);
    while (s.length < width) { s = "0" + s; }
    return s;
  }

  // "2026-01-31 07:00:05 EST" (or UTC), in the chosen zone; precise adds milliseconds.
  function exact(date, zone, precise) {
    var options = {
      year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit",
      minute: "2-digit", second: "2-digit", hourCycle: "h23", timeZoneName: "short"
    };
    if (zone === "utc") { options.timeZone = "UTC"; }
    var parts = {};
    new Intl.DateTimeFormat("en-US", options).formatToParts(date).forEach(function (p) {
      parts[p.type] = p.value;
    });
    // The year in four digits, as the server writes it (0001); 0 for 1 BC (local, near year 1).
    var year = zone === "utc" ? date.getUTCFullYear() : date.getFullYear();
    var text = pad(year, 4) + "-" + parts.month + "-" + parts.day + " " +
      parts.hour + ":" + parts.minute + ":" + parts.second;
    if (precise) { text += "." + pad(date.getUTCMilliseconds(), 3); }
    return text + " " + (zone === "utc" ? "UTC" : parts.timeZoneName);
  }

  // "just now", "42 s ago", "3 min ago", "5 h ago", "2 d ago", "4 mo ago", "in 3 min".
  function relative(date, now) {
    var seconds = Math.round((now - date.getTime()) / 1000);
    var size = Math.abs(seconds);
    if (size < 5) { return "just now"; }
    var steps = [[60, 1, "s"], [3600, 60, "min"], [86400, 3600, "h"],
                 [86400 * 60, 86400, "d"], [86400 * 365, 86400 * 30, "mo"]];
    var text = Math.floor(size / (86400 * 365)) + " y";
    for (var i = 0; i < steps.length; i++) {
      if (size < steps[i][0]) { text = Math.floor(size / steps[i][1]) + " " + steps[i][2]; break; }
    }
    return seconds >= 0 ? text + " ago" : "in " + text;
  }

  function applyOne(el, zone, now) {
    var date = new Date(el.getAttribute("datetime"));
    if (isNaN(date.getTime())) { return; }
    var precise = el.getAttribute("data-when") === "exact";
    var full = exact(date, zone, precise);
    var ago = relative(date, now);
    var text = precise ? full : ago;
    if (el.textContent !== text) { el.textContent = text; }
    var detail = el.parentNode && el.parentNode.querySelector(".when-detail");
    if (!detail) { return; }
    if (!detail.id) { detail.id = "when-" + (++counter); }
    el.setAttribute("aria-describedby", detail.id);
    var said = el.getAttribute("data-what") + " · " + el.getAttribute("data-clock-text") +
      ": " + exact(date, zone, true) + " (" + ago + ")";
    if (detail.textContent !== said) { detail.textContent = said; }
  }

  function apply(root) {
    var zone = document.documentElement.getAttribute("data-tz") || "utc";
    var now = Date.now();
    var scope = root && root.querySelectorAll ? root : document;
    var found = scope.querySelectorAll("time[data-when]");
    for (var i = 0; i < found.length; i++) { applyOne(found[i], zone, now); }
    if (scope.matches && scope.matches("time[data-when]")) { applyOne(scope, zone, now); }
  }

  function showToggle(zone) {
    var buttons = document.querySelectorAll(".tz-toggle button[data-tz]");
    for (var i = 0; i < buttons.length; i++) {
      buttons[i].setAttribute("aria-pressed", String(buttons[i].getAttribute("data-tz") === zone));
    }
    var groups = document.querySelectorAll(".tz-toggle");
    for (var j = 0; j < groups.length; j++) { groups[j].hidden = false; }
  }

  function choose(zone) {
    document.documentElement.setAttribute("data-tz", zone);
    remember(zone);
    showToggle(zone);
    apply(document);
  }

  function start() {
    var zone = stored();
    document.documentElement.setAttribute("data-tz", zone);
    if (document.cookie.indexOf(COOKIE + "=" + zone) < 0) { remember(zone); }
    showToggle(zone);
    apply(document);
    document.addEventListener("click", function (event) {
      var button = event.target.closest && event.target.closest(".tz-toggle button[data-tz]");
      if (button) { choose(button.getAttribute("data-tz")); }
    });
    document.body.addEventListener("htmx:afterSettle", function (e) { apply(e.target); });
    document.body.addEventListener("htmx:oobAfterSwap", function (e) { apply(e.target); });
    new MutationObserver(function (records) {
      for (var i = 0; i < records.length; i++) {
        var added = records[i].addedNodes;
        for (var j = 0; j < added.length; j++) {
          if (added[j].nodeType === 1) { apply(added[j]); }
        }
      }
    }).observe(document.body, { childList: true, subtree: true });
    window.setInterval(function () { apply(document); }, 30000);
  }

  window.sagaboardTimes = { apply: apply, relative: relative, exact: exact };
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
