// Live saga rows arrive on top of the list; keep only the newest copy of each row and
// no more rows than the page shows; a row that arrives "gone" (it left the list's filter)
// takes its older copy away with it. (A static file: no inline script anywhere.)
document.addEventListener("htmx:oobAfterSwap", function () {
  var body = document.getElementById("saga-rows");
  if (!body) return;
  var seen = {};
  var limit = parseInt(body.dataset.limit || "50", 10);
  var empty = document.getElementById("no-sagas");
  if (empty && body.querySelector("tr[id^='saga-']")) empty.remove();
  var kept = 0;
  Array.prototype.forEach.call(body.querySelectorAll("tr[id^='saga-']"), function (row) {
    if (seen[row.id] || kept >= limit) { row.remove(); return; }
    seen[row.id] = true;
    if (row.hasAttribute("data-gone")) { row.remove(); return; }
    kept += 1;
  });
});
