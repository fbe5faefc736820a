// The saga list: a running saga's duration ticks (now - started), written like the server's
// `duration` filter (sagaboard.ui.times.duration_text). A static file (the CSP allows no inline script); it only rewrites the
// text of <time class="duration" data-started="..."> elements.
(function () {
  // The same rules as sagaboard.ui.times.duration_text.
  function text(ms) {
    var seconds = Math.max(0, ms) / 1000;
    if (seconds < 0.0005) return seconds > 0 ? "<1 ms" : "0 ms";
    if (seconds < 1) return Math.round(seconds * 1000) + " ms";
    if (seconds < 9.95) return seconds.toFixed(1) + " s";
    var whole = Math.round(seconds), big, small, units;
    if (whole < 60) return whole + " s";
    if (whole < 3600) { big = Math.floor(whole / 60); small = whole % 60; units = ["min", "s"]; }
    else if (whole < 86400) { big = Math.floor(whole / 3600); small = Math.floor(whole % 3600 / 60); units = ["h", "min"]; }
    else { big = Math.floor(whole / 86400); small = Math.floor(whole % 86400 / 3600); units = ["d", "h"]; }
    return small ? big + " " + units[0] + " " + small + " " + units[1] : big + " " + units[0];
  }

  function tick() {
    var now = Date.now();
    document.querySelectorAll("time.duration[data-started]").forEach(function (el) {
      var started = Date.parse(el.getAttribute("data-started"));
      if (!isNaN(started)) el.textContent = text(now - started);
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    tick();
    setInterval(tick, 1000);
  });
})();
