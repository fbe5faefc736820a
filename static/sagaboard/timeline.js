// The saga timeline while the saga is live (sagaboard.sagas.pages.timeline): each second the
// now-line moves right and the bars still open (a run, an undo, a wait) stretch with it,
// until the chart's right edge; the next live update re-renders the whole timeline.
// Elapsed time is this browser's own (performance.now) since it first saw the chart, so a
// clock that differs from the server's moves nothing wrong. A chart swapped in by the live
// feed is a new element: it is picked up on the next tick. (A static file: the CSP allows
// no inline script.)
(function () {
  "use strict";
  var seen = new WeakMap();

  function state(svg) {
    var s = seen.get(svg);
    if (s) return s;
    s = {
      began: performance.now(),
      nowX: parseFloat(svg.getAttribute("data-now-x")),
      pxPerMs: parseFloat(svg.getAttribute("data-px-per-ms")),
      right: parseFloat(svg.getAttribute("data-right")),
      open: Array.prototype.map.call(svg.querySelectorAll("rect[data-open]"), function (r) {
        return { rect: r, x: parseFloat(r.getAttribute("x")), width: parseFloat(r.getAttribute("width")) };
      }),
    };
    seen.set(svg, s);
    return s;
  }

  function move(svg) {
    var s = state(svg);
    if (!isFinite(s.nowX) || !isFinite(s.pxPerMs)) return;
    var x = Math.min(s.nowX + (performance.now() - s.began) * s.pxPerMs, s.right);
    svg.querySelectorAll("line.now-line").forEach(function (line) {
      line.setAttribute("x1", x.toFixed(2));
      line.setAttribute("x2", x.toFixed(2));
    });
    var section = svg.closest(".saga-timeline");
    var label = section && section.querySelector(".now-label");
    if (label) label.setAttribute("x", x.toFixed(2));
    s.open.forEach(function (bar) {
      bar.rect.setAttribute("width", Math.max(bar.width, x - bar.x).toFixed(2));
    });
  }

  function tick() {
    if (document.hidden) return;
    document.querySelectorAll("svg.timeline-chart[data-live]").forEach(move);
  }

  window.setInterval(tick, 1000);
})();
