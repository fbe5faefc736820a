// The saga list: a running saga's duration ticks (now - started), written like the server's
// `duration` filter. A static file (the CSP allows no inline script); it only rewrites the
// text of <time class="duration" data-started="..."> elements.
(function () {
  function text(ms) {
    ms = Math.max(0, Math.floor(ms));
    if (ms < 1000) return ms + " ms";
    var s = Math.floor(ms / 1000);
    if (s < 60) return (ms / 1000).toFixed(1) + " s";
    var m = Math.floor(s / 60); s = s % 60;
    if (m < 60) return m + " min " + s + " s";
    var h = Math.floor(m / 60); m = m % 60;
    if (h < 48) return h + " h " + m + " min";
    return Math.floor(h / 24) + " d " + (h % 24) + " h";
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
