// loopwright dashboard: live status by polling the JSON API where a browser lacks EventSource
// (live.js). No library, no inline script.
(function () {
  "use strict";
  var TERMINAL = ["accepted", "stopped", "escalated", "failed", "cancelled"];
  function label(s) {
    var span = document.createElement("span");
    span.className = "status st-" + s;
    span.textContent = s.replace(/_/g, " ");
    return span;
  }
  function shown(text) {  // as live.js writes stored text: what reorders it written out
    return String(text).replace(/[\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g,
      function (c) { return "\\u" + ("000" + c.charCodeAt(0).toString(16)).slice(-4); });
  }
  function get(url) {
    return fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) { if (!r.ok) { throw new Error(r.status); } return r.json(); });
  }
  function pollRuns(table) {
    var open = table.querySelectorAll("tr[data-run-id]");
    var anyOpen = Array.prototype.some.call(open, function (tr) {
      return TERMINAL.indexOf(tr.getAttribute("data-status")) < 0;
    });
    if (!anyOpen) { return; }
    get(table.getAttribute("data-poll")).then(function (runs) {
      var byId = {};
      runs.forEach(function (r) { byId[r.run_id] = r; });
      open.forEach(function (tr) {
        var r = byId[tr.getAttribute("data-run-id")];
        if (!r || r.status === tr.getAttribute("data-status")) { return; }
        tr.setAttribute("data-status", r.status);
        var cell = tr.querySelector(".js-status");
        cell.textContent = "";
        cell.appendChild(label(r.status));
        tr.querySelector(".js-words").textContent = shown(r.stop_cause || r.stop_words);
        tr.querySelector(".js-cycle").textContent = String(r.cycle);
      });
    }).catch(function () {}).then(function () { setTimeout(function () { pollRuns(table); }, 3000); });
  }
  function pollRun(el) {
    if (el.getAttribute("data-terminal") === "yes") { return; }
    get("/api/runs/" + encodeURIComponent(el.getAttribute("data-run-id"))).then(function (d) {
      if (d.run.status !== el.getAttribute("data-status") || d.run.cycle !== undefined && el.getAttribute("data-cycle") !== null && String(d.run.cycle) !== el.getAttribute("data-cycle")) {
        window.location.replace(window.location.pathname);
        return;
      }
      setTimeout(function () { pollRun(el); }, 1500);
    }).catch(function () { setTimeout(function () { pollRun(el); }, 5000); });
  }
  document.addEventListener("DOMContentLoaded", function () {
    if (window.EventSource) { return; }  // live.js follows /api/events instead of polling
    var table = document.getElementById("runs");
    if (table) { setTimeout(function () { pollRuns(table); }, 3000); }
    var run = document.getElementById("run-status");
    if (run) { setTimeout(function () { pollRun(run); }, 1000); }
  });
})();
