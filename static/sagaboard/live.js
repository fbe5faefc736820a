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

// The feed closed because this browser may no longer watch it: 4401, no longer logged in
// (logged out, session ended, account deactivated); 4403, no longer allowed (taken out of
// the project or the role). The page on screen is then out of date and may show what the
// user can no longer see: reload it once (to the login page, or to what they may see
// now), and say so instead if a reload just happened for the same reason (no loop).
// A page already on its way elsewhere (the "Log out" button of this very tab) is left to
// go there: a reload would race the navigation and land on the login page with a ?next=.
var leaving = false;
window.addEventListener("beforeunload", function () { leaving = true; });
document.addEventListener("htmx:wsClose", function (evt) {
  var code = evt.detail && evt.detail.event && evt.detail.event.code;
  if (code !== 4401 && code !== 4403) return;
  if (leaving) return;
  var key = "sagaboard.live-closed." + code;
  var last = parseInt(window.sessionStorage.getItem(key) || "0", 10);
  liveState("off", "Not live");
  if (Date.now() - last > 30000) {
    window.sessionStorage.setItem(key, String(Date.now()));
    window.location.reload();
    return;
  }
  var flash = document.getElementById("flash");
  if (!flash) return;
  flash.textContent = code === 4401
    ? "Live updates stopped: you are no longer logged in. Reload to log in again."
    : "Live updates stopped: you may no longer see what this page shows. Reload the page.";
  flash.className = "message error";
  flash.setAttribute("role", "alert");
  flash.hidden = false;
});

// The header's live indicator (#live-state) says whether what the page shows is still
// followed: "Live" while the feed's socket is open, "Reconnecting" while it is not (htmx's
// ws extension tries again, and the page catches up from its last event when it is back).
// The server replaces it with "Live updates delayed" while its relay cannot read the log
// or reach the channel layer, and with "Live" again once it can.
function liveState(state, text) {
  var el = document.getElementById("live-state");
  if (!el) return;
  el.hidden = false;  // hidden until the page's script runs: without it nothing is live
  el.dataset.state = state;
  el.textContent = text;
}
document.addEventListener("htmx:wsOpen", function () { liveState("live", "Live"); });
document.addEventListener("htmx:wsClose", function (evt) {
  var code = evt.detail && evt.detail.event && evt.detail.event.code;
  if (code === 4401 || code === 4403 || leaving) return;  // handled above
  liveState("reconnecting", "Reconnecting…");
});

// The saga page's owner and notes (#notes) are per person (which notes one may edit), so
// the shared live body carries only the number of their newest change
// (data-notes-version). When it is newer than the number #notes was read at, #notes is
// read again for this person. What they were typing there, the <details> they had open
// and the field they were in are kept across the swap.
var notesReading = false;
function notesFollow() {
  var section = document.getElementById("notes");
  var body = document.querySelector("[id^='saga-live-'][data-notes-version]");
  if (!section || !body || notesReading) return;
  // Only forward: a section read after the body may already be newer than it.
  if (!(parseInt(body.dataset.notesVersion, 10) > parseInt(section.dataset.version, 10))) return;
  notesReading = true;
  fetch(section.dataset.refreshUrl, { credentials: "same-origin" })
    .then(function (answer) { return answer.ok ? answer.text() : null; })
    .then(function (html) {
      if (!html) return false;
      var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("notes");
      var now = document.getElementById("notes");
      if (!fresh || !now) return false;
      now.querySelectorAll("textarea[id]").forEach(function (old) {
        var kept = fresh.querySelector("#" + CSS.escape(old.id));
        if (kept && old.value !== old.defaultValue) kept.value = old.value;
      });
      now.querySelectorAll("details[open]").forEach(function (old) {
        var note = old.closest("[id^='note-']");
        var where = note ? fresh.querySelector("#" + CSS.escape(note.id)) : fresh;
        var same = where && where.querySelector("details." + old.className.split(" ")[0]);
        if (same) same.open = true;
      });
      var focused = document.activeElement && now.contains(document.activeElement)
        ? document.activeElement.id : "";
      now.replaceWith(fresh);
      if (focused && document.getElementById(focused)) document.getElementById(focused).focus();
      if (window.htmx) window.htmx.process(fresh);
      return true;
    })
    .catch(function () { return false; })  // the next live update asks again
    .then(function (done) {
      notesReading = false;
      if (done) notesFollow();  // another change may have arrived while this one was read
    });
}
document.addEventListener("htmx:oobAfterSwap", notesFollow);
