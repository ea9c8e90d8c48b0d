(function () {
  "use strict";
  // Every text goes in as text (textContent, title), never as HTML; the server already cut it
  // and showed its bidi controls as code points, and each sits in a <bdi dir=auto> as well.
  var page = document.getElementById("timeline");
  var api = page.getAttribute("data-api");
  var state = JSON.parse(document.getElementById("timeline-data").textContent);
  var cost = null;
  var POLL_MS = 3000;

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function bdi(text) {
    var b = el("bdi", null, text);
    b.dir = "auto";
    return b;
  }
  function usd(value) {
    return value === null || value === undefined ? "-" : "$" + Number(value).toFixed(6);
  }
  function took(ms) {
    if (ms === null || ms === undefined) return "-";
    return ms < 1000 ? ms + " ms" : (ms / 1000).toFixed(ms < 10000 ? 2 : 1) + " s";
  }
  function at(iso) {
    var t = iso ? Date.parse(iso) : NaN;
    return isNaN(t) ? null : t;
  }
  function runLink(run, label) {
    var a = el("a", null, label);
    a.href = encodeURIComponent(run.run_id);
    return a;
  }

  function span(t) {
    // The time axis: the run's start to its end (or now, while it runs), whatever a clock said.
    var start = at(t.run.created_at), end = at(t.run.ended_at) || Date.now();
    t.turns.forEach(function (turn) {
      [turn.start, turn.end].forEach(function (s) {
        var v = at(s);
        if (v !== null) { start = Math.min(start, v); end = Math.max(end, v); }
      });
      turn.calls.forEach(function (c) {
        [c.start, c.end, c.wait && c.wait.start, c.wait && c.wait.end].forEach(function (s) {
          var v = at(s);
          if (v !== null) { start = Math.min(start, v); end = Math.max(end, v); }
        });
      });
    });
    return { start: start, length: Math.max(1, end - start) };
  }

  var MIN_BAR_PX = 3;  // .bar's min-width: a call of a millisecond still shows
  function place(node, axis, from, to) {
    var left = (from - axis.start) / axis.length * 100;
    var width = (Math.max(to, from) - from) / axis.length * 100;
    // A bar widened to its minimum at the axis's end is moved left, never drawn past the axis.
    node.style.left = "min(" + left.toFixed(3) + "%, calc(100% - " + MIN_BAR_PX + "px))";
    node.style.width = width.toFixed(3) + "%";
    return node;
  }

  // A call's label is the tool's name, whole: on its bar when it fits there, else beside it,
  // after it or, with no room left of the axis's end, before it. Measured once laid out (and
  // again when the window's width changes): a name is never cut to its first letter.
  var GAP_PX = 4;
  function fitLabels() {
    Array.prototype.forEach.call(page.querySelectorAll(".lane > .label"), function (label) {
      var lane = label.parentNode, bar = lane.querySelector(".bar");
      var room = lane.getBoundingClientRect(), box = bar.getBoundingClientRect();
      var wide = label.offsetWidth, from = box.left - room.left, to = box.right - room.left;
      var x, outside = wide > box.width;
      if (!outside) x = from;
      else if (to + GAP_PX + wide <= room.width) x = to + GAP_PX;
      else x = Math.max(0, from - GAP_PX - wide);
      label.className = "label" + (outside ? " outside" : "");
      label.style.left = (room.width ? x / room.width * 100 : 0).toFixed(3) + "%";
    });
  }

  function header(t) {
    var run = t.run, box = el("section");
    var h = el("h1", null, "Run ");
    h.appendChild(bdi(run.run_id));
    box.appendChild(h);
    var meta = el("div", "meta");
    meta.appendChild(el("span", "status " + run.status, run.status));
    var agent = el("span", null, "agent ");
    agent.appendChild(bdi(run.agent));
    meta.appendChild(agent);
    meta.appendChild(el("span", null, "started " + run.created_at));
    meta.appendChild(el("span", null, "duration " + (run.duration_ms === null ? "running" : took(run.duration_ms))));
    meta.appendChild(el("span", null, "tokens " + run.prompt_tokens + " in + " + run.completion_tokens + " out"));
    meta.appendChild(el("span", "cost-model", "model " + usd(run.cost_usd)));
    if (cost) {
      meta.appendChild(el("span", "cost-infra", "infrastructure " + usd(cost.infra_usd)));
      meta.appendChild(el("span", "cost-total", "total " + usd(cost.total_usd)));
    }
    if (run.parent) {
      var parent = el("span", null, "child run of ");
      parent.appendChild(runLink(run.parent, run.parent.run_id));
      meta.appendChild(parent);
    }
    var list = el("a", null, "all runs");
    list.href = "../runs";
    meta.appendChild(list);
    box.appendChild(meta);
    box.appendChild(el("div", "note", "Input"));
    box.appendChild(el("div", "text")).appendChild(bdi(run.input));
    if (run.error) box.appendChild(el("div", "text mark error")).appendChild(bdi(run.error));
    t.handoffs.forEach(function (h) {
      box.appendChild(el("div", "note handoff",
        "Handoff after turn " + h.turn + ": " + h.from_agent + " → " + h.to_agent + " (" + h.kind + ")"));
    });
    if (t.children.length) {
      var kids = el("div", "note children", "Child runs: ");
      t.children.forEach(function (c) {
        kids.appendChild(runLink(c, (c.tool || c.agent || c.run_id) + " (" + c.status + ")"));
        kids.appendChild(document.createTextNode(" "));
      });
      box.appendChild(kids);
    }
    return box;
  }

  function legend() {
    var box = el("div", "legend");
    [["model", "model call"], ["ok", "tool call"], ["error", "error"], ["doubt", "in doubt"],
     ["wait", "waiting for a person"]].forEach(function (p) {
      var item = el("span");
      item.appendChild(el("i", p[0]));
      item.appendChild(document.createTextNode(p[1]));
      box.appendChild(item);
    });
    return box;
  }

  function axisRow(axis) {
    var row = el("div", "axis");
    row.appendChild(el("div", null, "turn"));
    var ticks = el("div", "ticks");
    [0, 0.25, 0.5, 0.75, 1].forEach(function (f) {
      var tick = el("span", null, took(Math.round(axis.length * f)));
      tick.style.left = f * 100 + "%";
      ticks.appendChild(tick);
    });
    row.appendChild(ticks);
    return row;
  }

  function callLane(call, axis, now) {
    var lane = el("div", "lane");
    var start = at(call.start), end = at(call.end);
    if (call.wait) {
      var w = call.wait, from = at(w.start), to = at(w.end) || now;
      var who = w.decided_by ? " · " + w.status + " by " + w.decided_by : " · " + w.status;
      var shade = place(el("div", "wait", "waited for " + (w.kind === "approval" ? "approval" : "an answer") + who),
        axis, from, to);
      shade.title = "waited " + took(to - from) + who + (w.reason ? "\nreason: " + w.reason : "") +
        (w.edited ? "\narguments edited by a person" : "");
      shade.setAttribute("data-seq", call.seq);
      lane.appendChild(shade);
      if (start === null) start = to;
    }
    if (start === null) start = at(call.end) || now;
    if (end === null) end = call.status === "pending" ? now : start;
    var cls = "bar call " + call.status + (call.in_doubt ? " in-doubt" : "");
    var bar = place(el("div", cls), axis, start, end);
    bar.setAttribute("data-seq", call.seq);
    bar.setAttribute("data-tool", call.tool);
    bar.title = call.tool + "(" + call.arguments + ")\n" + call.status +
      (call.error_type ? " " + call.error_type : "") + (call.in_doubt ? " (in doubt)" : "") +
      " · " + took(call.duration_ms) + " · attempts " + (call.attempts || 0) +
      (call.result !== null ? "\n→ " + call.result : "");
    lane.appendChild(bar);
    var label = el("span", "label");
    label.setAttribute("data-seq", call.seq);
    label.appendChild(bdi(call.tool));
    lane.appendChild(label);
    return lane;
  }

  function turnRow(turn, axis, now) {
    var row = el("div", "turn");
    row.id = "turn-" + turn.seq;
    var side = el("div", "side");
    var title = el("b", null, "Turn " + turn.turn + " · ");
    title.appendChild(bdi(turn.agent));
    side.appendChild(title);
    side.appendChild(el("div", null,
      (turn.prompt_tokens === null ? "-" : turn.prompt_tokens + " in + " + turn.completion_tokens + " out") +
      " · " + usd(turn.cost_usd)));
    if (turn.content) side.appendChild(el("div", "text")).appendChild(bdi(turn.content));
    row.appendChild(side);
    var track = el("div", "track");
    var model = el("div", "lane");
    var end = at(turn.end), start = at(turn.start);
    var bar = place(el("div", "bar model"), axis, start === null ? end : start, end);
    bar.title = "model call · " + took(start === null ? null : end - start);
    model.appendChild(bar);
    track.appendChild(model);
    var marks = el("div", "marks");
    turn.calls.forEach(function (call) {
      track.appendChild(callLane(call, axis, now));
      if (call.in_doubt) marks.appendChild(el("span", "mark doubt", "⚠ " + call.tool + ": in doubt"));
      else if (call.status === "error") {
        marks.appendChild(el("span", "mark error", "✖ " + call.tool + ": " + (call.error_type || "error")));
      }
      if (call.handoff) marks.appendChild(el("span", "mark", "↪ " + call.handoff));
      if (call.child) {
        var m = el("span", "mark", "child run: ");
        m.appendChild(runLink(call.child, call.child.agent + " (" + call.child.status + ")"));
        marks.appendChild(m);
      }
    });
    if (turn.calls_omitted) marks.appendChild(el("span", "mark", turn.calls_omitted + " more calls not shown"));
    if (marks.childNodes.length) track.appendChild(marks);
    row.appendChild(track);
    return row;
  }

  function render(t) {
    var now = Date.now(), axis = span(t);
    var body = el("div");
    body.appendChild(header(t));
    body.appendChild(legend());
    if (t.turns_omitted) body.appendChild(el("p", "note", t.turns_omitted + " earlier turns not shown"));
    body.appendChild(axisRow(axis));
    t.turns.forEach(function (turn) { body.appendChild(turnRow(turn, axis, now)); });
    if (!t.turns.length) body.appendChild(el("p", "note", "No model reply yet."));
    page.replaceChildren(body);
    fitLabels();
  }
  window.addEventListener("resize", fitLabels);

  function running() { return state.run.status === "running"; }

  function fetchCost() {
    // `cost` on GET /runs/{id} (model + infrastructure), where the API reports it.
    fetch(api, { headers: { Accept: "application/json" }, credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (body) {
        var c = body && body.cost;
        if (c && typeof c === "object") { cost = c; render(state); }
      })
      .catch(function () {});
  }

  var pending = null;
  function refresh() {
    if (pending) return;
    pending = setTimeout(function () {
      fetch(api + "/timeline", { headers: { Accept: "application/json" }, credentials: "same-origin" })
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (t) {
          pending = null;
          if (!t) return;
          var was = running();
          state = t;
          render(t);
          if (was && !running()) { stop(); fetchCost(); }
        })
        .catch(function () { pending = null; });
    }, 200);
  }

  var source = null, poll = null, tick = null;
  function stop() {
    if (source) source.close();
    if (poll) clearInterval(poll);
    if (tick) clearInterval(tick);
    source = poll = tick = null;
  }
  function live() {
    // The local server streams a run's events; the deployed API (REST, no streaming) does not:
    // there the stream is refused and the page polls instead.
    var opened = false;
    var last = 0;
    state.turns.forEach(function (t) { last = Math.max(last, t.seq); });
    try {
      source = new EventSource(api + "/events?after=" + last);
    } catch (e) {
      source = null;
    }
    if (source) {
      source.onopen = function () { opened = true; };
      ["item", "approval", "end"].forEach(function (name) {
        source.addEventListener(name, refresh);
      });
      source.onerror = function () {
        if (!opened && source && source.readyState === EventSource.CLOSED) {
          source = null;
          poll = setInterval(refresh, POLL_MS);
        }
      };
    } else {
      poll = setInterval(refresh, POLL_MS);
    }
    // Bars of calls still going grow with the clock.
    tick = setInterval(function () { render(state); }, 1000);
  }

  render(state);
  fetchCost();
  if (running()) live();
})();
