// loopwright dashboard: live updates from /api/events (server-sent events), without reloading.
// The runs list updates its rows and inserts new runs, a run's page its status, every page
// the approvals badge and a banner for each new request. No library, no inline script.
(function () {
  "use strict";
  if (!window.EventSource) { return; }  // app.js polls instead
  var root = document.documentElement;
  var RETRY_MIN_MS = 1000;  // a refused stream is asked for again after this, doubling ...
  var RETRY_MAX_MS = 60000;  // ... up to this (or what the server's Retry-After says, capped)

  // Stored text with the characters that reorder what is read written out ("\u202e"), as
  // the server writes it into pages (web/_values.reveal).
  function shown(text) {
    return String(text).replace(/[\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g,
      function (c) { return "\\u" + ("000" + c.charCodeAt(0).toString(16)).slice(-4); });
  }
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) { e.className = cls; }
    if (text !== undefined) { e.textContent = shown(text); }
    return e;
  }
  function label(s) { return el("span", "status st-" + s, s.replace(/_/g, " ")); }
  function byAttr(scope, attr, value) {
    var all = scope.querySelectorAll("[" + attr + "]");
    for (var i = 0; i < all.length; i++) {
      if (all[i].getAttribute(attr) === value) { return all[i]; }
    }
    return null;
  }

  function banner(kind, text, href, linkText) {
    var box = document.getElementById("live-banner");
    if (!box) {
      box = el("div", "live-banner");
      box.id = "live-banner";
      box.setAttribute("role", "status");
      var main = document.querySelector("main");
      if (!main) { return; }
      main.insertBefore(box, main.firstChild);
    }
    var p = el("p", "live-" + kind, text + " ");
    if (href) {
      var a = el("a", "", linkText);
      a.href = href;
      p.appendChild(a);
    }
    box.insertBefore(p, box.firstChild);
    while (box.children.length > 5) { box.removeChild(box.lastChild); }
  }

  function setPending(delta) {
    var badge = document.getElementById("pending-count");
    if (!badge) {
      var link = document.querySelector('header nav a[href="/approvals"]');
      if (!link || delta <= 0) { return; }
      badge = el("span", "badge", "0");
      badge.id = "pending-count";
      link.appendChild(document.createTextNode(" "));
      link.appendChild(badge);
    }
    var n = Math.max(0, (parseInt(badge.textContent, 10) || 0) + delta);
    badge.textContent = String(n);
    badge.hidden = n === 0;
  }

  // --- the runs list -------------------------------------------------------------------
  function unfiltered() {
    var q = new URLSearchParams(window.location.search);
    var any = false;
    q.forEach(function (v) { if (v) { any = true; } });
    return !any;  // the first page, no filter: where a new run belongs at the top
  }
  function updateRow(tr, r) {
    tr.setAttribute("data-status", r.status);
    var cell = tr.querySelector(".js-status");
    if (cell) { cell.textContent = ""; cell.appendChild(label(r.status)); }
    var words = tr.querySelector(".js-words .cause") || tr.querySelector(".js-words");
    if (words) { words.textContent = shown(r.stop_cause || r.stop_words || ""); }
    var cycle = tr.querySelector(".js-cycle");
    if (cycle) { cycle.textContent = String(r.cycle); }
    tr.classList.add("live-changed");
  }
  function keepTicks(from, to) {
    var ticked = from.querySelectorAll("input:checked");
    for (var i = 0; i < ticked.length; i++) {
      var same = to.querySelectorAll("input");
      for (var j = 0; j < same.length; j++) {
        if (same[j].name === ticked[i].name && same[j].value === ticked[i].value) { same[j].checked = true; }
      }
    }
  }
  function renderRow(table, r) {
    // The row as the server renders it (its columns are the template's, not this file's):
    // a new run's, or an ended run's with its end time and held-out verdict.
    fetch(window.location.pathname + "?q=" + encodeURIComponent(r.run_id), {
      credentials: "same-origin"
    }).then(function (resp) { return resp.ok ? resp.text() : ""; }).then(function (html) {
      if (!html) { return; }
      var doc = new DOMParser().parseFromString(html, "text/html");
      var row = byAttr(doc, "data-run-id", r.run_id);
      var body = table.tBodies[0];
      if (!row || !body) { return; }
      row = document.importNode(row, true);
      var old = byAttr(table, "data-run-id", r.run_id);
      if (old) {
        if (old.getAttribute("data-status") !== row.getAttribute("data-status")) { return; }  // a later change won
        keepTicks(old, row);
        row.classList.add("live-changed");
        old.parentNode.replaceChild(row, old);
        return;
      }
      row.classList.add("live-new");
      var empty = body.querySelector("td[colspan]");
      if (empty && empty.parentNode) { body.removeChild(empty.parentNode); }
      body.insertBefore(row, body.firstChild);
    }).catch(function () {});
  }
  function onRunInList(table, r) {
    var tr = byAttr(table, "data-run-id", r.run_id);
    if (tr) {
      var changed = tr.getAttribute("data-status") !== r.status;
      updateRow(tr, r);
      if (changed && r.ended_at) { renderRow(table, r); }
    } else if (r["new"] && unfiltered()) {
      renderRow(table, r);
    }
  }

  // --- a run's page ----------------------------------------------------------------------
  function onRunPage(head, r) {
    if (head.getAttribute("data-run-id") !== r.run_id) { return; }
    var was = head.getAttribute("data-status");
    var seen = head.getAttribute("data-live-cycle");
    if (was === r.status && seen === String(r.cycle)) { return; }
    head.setAttribute("data-status", r.status);
    head.setAttribute("data-live-cycle", String(r.cycle));
    head.textContent = "";
    head.appendChild(label(r.status));
    var what = "This run is now " + r.status.replace(/_/g, " ") + " at cycle " + r.cycle +
      (r.stop_cause ? ": " + r.stop_cause : "") + ".";
    banner("run", what, window.location.pathname, "Show the latest");
    // The rest of the header was drawn for the old status: say so, rather than leave
    // "where it stands" and the action buttons describing a run that has moved on.
    var cause = document.getElementById("stop-cause");
    if (cause) {
      cause.textContent = shown(r.stop_cause || r.stop_words || r.status.replace(/_/g, " "));
    }
    var next = document.getElementById("next-action");
    if (next) {
      next.textContent = "The run changed after this page was drawn: ";
      var link = el("a", "", "show the latest");
      link.href = window.location.pathname;
      next.appendChild(link);
      next.appendChild(document.createTextNode(" before acting on it."));
    }
    var actions = document.getElementById("run-actions");
    if (actions) {
      var buttons = actions.querySelectorAll("button");
      for (var i = 0; i < buttons.length; i++) { buttons[i].disabled = true; }
      actions.title = "The run changed: show the latest page to act on it";
    }
  }

  // --- approval requests -------------------------------------------------------------------
  function onApproval(a) {
    var inbox = document.querySelector("section.card[data-approval-id]") ||
      document.getElementById("inbox");
    if (a.status === "pending") {
      if (!a["new"]) { return; }
      setPending(1);
      banner("approval", "New approval request: " + a.what + " (run " + a.run_id.slice(0, 12) +
        ", " + a.kind + ").", "/approvals?q=" + encodeURIComponent(a.approval_id), "Open it");
      return;
    }
    setPending(-1);
    var card = byAttr(document, "data-approval-id", a.approval_id);
    var who = a.status + (a.decided_by ? " by " + a.decided_by : "");
    if (card) {
      card.classList.remove("pending");
      card.classList.add("decided");
      card.insertBefore(el("p", "flash live-decided", "Request " + who + "."), card.firstChild);
      var buttons = card.querySelectorAll("button");
      for (var i = 0; i < buttons.length; i++) { buttons[i].disabled = true; }
    } else if (inbox) {
      banner("decided", "Request " + a.what + " was " + who + ".", "/runs/" + a.run_id, "Open the run");
    }
  }

  document.addEventListener("DOMContentLoaded", function () {
    var table = document.getElementById("runs");
    var head = document.getElementById("run-status");
    // From the stream's position when the server drew this page: a change found while the
    // page loaded is sent, not missed. The browser's own reconnect sends Last-Event-ID, which
    // the server prefers; a stream opened again here asks for what followed the last event seen.
    var after = parseInt(root.getAttribute("data-live-after") || "", 10);
    var backoff = RETRY_MIN_MS;
    function onRun(e) {
      seen(e);
      var r = JSON.parse(e.data);
      if (table) { onRunInList(table, r); }
      if (head) { onRunPage(head, r); }
    }
    function onApprovalEvent(e) { seen(e); onApproval(JSON.parse(e.data)); }
    function seen(e) {
      var n = parseInt(e.lastEventId, 10);
      if (n >= 0) { after = n; }
    }
    function connect() {
      root.removeAttribute("data-live-retry-ms");
      var es = new EventSource("/api/events" + (after >= 0 ? "?after=" + after : ""));
      es.addEventListener("open", function () {
        backoff = RETRY_MIN_MS;
        root.setAttribute("data-live", "on");
      });
      es.addEventListener("error", function () {
        root.setAttribute("data-live", "off");
        // A refusal (the server's streams all taken: 503 with Retry-After; a restart
        // mid-answer) closes an EventSource for good; a dropped connection it retries itself.
        if (es.readyState === EventSource.CLOSED) { es.close(); later(); }
      });
      es.addEventListener("run", onRun);
      es.addEventListener("approval", onApprovalEvent);
    }
    // Why the stream was refused, asked with a HEAD (an EventSource shows no status or header):
    // a sign-in that ended stops here; else wait as Retry-After says, and at least the backoff,
    // which doubles up to RETRY_MAX_MS, a random part added so that the pages refused at once
    // do not all come back at the same moment.
    function later() {
      function wait(ms) {
        var delay = Math.round(ms + Math.random() * ms / 4);
        backoff = Math.min(backoff * 2, RETRY_MAX_MS);
        root.setAttribute("data-live", "retry");
        root.setAttribute("data-live-retry-ms", String(delay));
        window.setTimeout(connect, delay);
      }
      fetch("/api/events", { method: "HEAD", credentials: "same-origin", cache: "no-store" })
        .then(function (r) {
          if (r.status === 401 || r.status === 403) { return; }  // signed out: no live updates
          var said = parseInt(r.headers.get("Retry-After") || "", 10);
          wait(Math.max(backoff, said > 0 ? Math.min(said * 1000, RETRY_MAX_MS) : 0));
        }, function () { wait(backoff); });
    }
    connect();
  });
})();
