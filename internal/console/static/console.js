// compactd console: the only script, served from the binary (CSP script-src 'self').
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  // Filters submit themselves when changed.
  document.querySelectorAll("select.autosubmit").forEach(function (s) {
    s.addEventListener("change", function () { if (s.form) s.form.submit(); });
  });
  // The live view: the server renders the panel; this only fetches it again every 3 s.
  var live = document.getElementById("live");
  if (live) {
    var refresh = function () {
      fetch(live.dataset.src, { credentials: "same-origin", cache: "no-store" })
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (d) { if (d && typeof d.html === "string") live.innerHTML = d.html; })
        .catch(function () {});
    };
    setInterval(refresh, 3000);
  }
});
