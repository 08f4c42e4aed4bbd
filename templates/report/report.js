// The evo report's script: draws the figures with Plotly, shows a lineage node's record when it
// is selected, and writes what it drew into #evo-report-summary (read by tests and scripts).
// Data comes from the JSON blocks #evo-figures and #evo-graph; text from the database is only
// ever set as textContent, never parsed as HTML.
(function () {
  "use strict";

  var figures = JSON.parse(document.getElementById("evo-figures").textContent);
  var graph = JSON.parse(document.getElementById("evo-graph").textContent);
  var byId = {};
  graph.nodes.forEach(function (n) { byId[n.id] = n; });
  var lineageDiv = null;
  var highlightTrace = -1;

  function el(tag, attrs) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) {
      if (k === "text") node.textContent = attrs[k];
      else if (k === "cls") node.className = attrs[k];
      else node.setAttribute(k, attrs[k]);
    });
    for (var i = 2; i < arguments.length; i++) {
      var c = arguments[i];
      if (c === null || c === undefined) continue;
      node.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
    }
    return node;
  }

  function fmt(x, digits) {
    return x === null || x === undefined ? "—" : Number(x).toFixed(digits === undefined ? 2 : digits);
  }

  function ratio(x) { return x === null || x === undefined ? "—" : "x" + Number(x).toFixed(3); }

  function table(caption, head, rows) {
    var t = el("table", {}, el("caption", { text: caption }));
    var tr = el("tr");
    head.forEach(function (h) { tr.appendChild(el("th", { text: h })); });
    t.appendChild(el("thead", {}, tr));
    var body = el("tbody");
    rows.forEach(function (r) {
      var row = el("tr");
      r.forEach(function (cell) {
        row.appendChild(cell instanceof Node ? el("td", {}, cell) : el("td", { text: String(cell) }));
      });
      body.appendChild(row);
    });
    t.appendChild(body);
    return t;
  }

  function nodeLink(id) {
    var n = byId[id];
    var a = el("a", { href: "#lineage", text: n ? n.short : id.slice(0, 12) });
    a.addEventListener("click", function (e) { e.preventDefault(); select(id); });
    return a;
  }

  function caseName(t) { return t.case + (t.causal ? "c" : "") + "-" + t.dtype; }

  function timingsTable(d) {
    var backends = [];
    d.cases.forEach(function (c) {
      Object.keys(c.us).forEach(function (b) { if (b !== "evo" && backends.indexOf(b) < 0) backends.push(b); });
    });
    var rows = d.cases.map(function (c) {
      var evo = c.us.evo;
      return [c.tag, c.B + "," + c.H + "," + c.L + "," + c.D, fmt(evo[0]) + " (" + fmt(evo[1]) + "-" + fmt(evo[2]) + ")",
              fmt(c.tflops, 1)].concat(backends.map(function (b) {
        return c.us[b] && evo[0] ? (c.us[b][0] / evo[0]).toFixed(2) + "x" : "—";
      }));
    });
    return table("FAST timings (device time per launch, us; speedup = baseline / evo)",
                 ["case", "B,H,L,D", "evo us (p20-p80)", "TFLOP/s"].concat(backends.map(function (b) { return "vs " + b.replace(/^sdpa_/, ""); })),
                 rows);
  }

  function ptxasTable(d) {
    var b = d.builds[d.builds.length - 1];
    var rows = Object.keys(b.resources).map(function (name) {
      var r = b.resources[name];
      return [name, r.registers, r.smem_static, r.smem_dynamic, r.spill_stores, r.spill_loads, r.stack_frame];
    });
    return table("ptxas report (build " + b.status + (b.cached ? ", cached" : "") + ", " + fmt(b.seconds, 1) + " s)",
                 ["entry", "regs", "smem static", "smem dynamic", "spill st", "spill ld", "stack"], rows);
  }

  function checksTable(e) {
    var passed = e.checks.filter(function (c) { return c.passed; }).length;
    var rows = e.checks.map(function (c) {
      return [caseName(c), c.B + "," + c.H + "," + c.L + "," + c.D, c.seed, c.passed ? "yes" : "NO",
              c.max_abs_err === null ? "nan" : Number(c.max_abs_err).toExponential(2),
              c.tolerance === null ? "—" : Number(c.tolerance).toExponential(2), c.reason];
    });
    return table("GREEN checks of evaluation " + e.id + " on " + e.device + ": " + passed + "/" + e.checks.length + " passed",
                 ["case", "B,H,L,D", "seed", "ok", "max err", "tolerance", "reason"], rows);
  }

  function edgesTable(title, edges) {
    return table(title, ["id", "kind", "move", "effect", "status"], edges.map(function (e) {
      return [nodeLink(e.id), e.kind, Object.keys(e.mutation).map(function (k) {
        return k + " " + e.mutation[k][0] + "→" + e.mutation[k][1];
      }).join(", ") || "(no change)", ratio(e.effect), e.status || "?"];
    }));
  }

  function show(id) {
    var d = graph.details[id];
    var panel = document.getElementById("panel");
    panel.textContent = "";
    if (!d) { panel.appendChild(el("p", { cls: "empty", text: "No record for " + id })); return; }
    panel.appendChild(el("h3", {}, el("code", { text: d.id.slice(0, 12) }), " ", d.label));
    panel.appendChild(el("p", {}, el("span", { cls: "status s-" + d.status, text: d.status }),
                         d.reason ? " " + d.reason : ""));
    panel.appendChild(el("p", { cls: "meta", text: d.family + " v" + d.family_version + ", " + (d.arch || "no arch") +
                                " · score " + Object.keys(d.scores).map(function (b) { return b + " " + ratio(d.scores[b]); }).join(", ") +
                                " · id " + d.id }));
    panel.appendChild(table("genes", ["parameter", "value"], Object.keys(d.params).map(function (k) {
      return [k, String(d.params[k])];
    })));
    if (d.parents.length) panel.appendChild(edgesTable("parents (move that made this one, its effect)", d.parents));
    if (d.children.length) panel.appendChild(edgesTable("children", d.children));
    if (d.cases.length) panel.appendChild(timingsTable(d));
    if (d.builds.length) {
      var last = d.builds[d.builds.length - 1];
      if (Object.keys(last.resources).length) panel.appendChild(ptxasTable(d));
      else panel.appendChild(el("p", { cls: "empty", text: "No ptxas report stored (build " + last.status + ")." }));
      if (last.log) panel.appendChild(el("pre", { cls: "log", text: last.log }));
    } else {
      panel.appendChild(el("p", { cls: "empty", text: "No build stored." }));
    }
    d.evaluations.forEach(function (e) {  // what makes each pass reproducible and its timings attributable
      var facts = ["salt", "green_drawn", "fast_outputs_checked", "cubin_sha256"].filter(function (k) {
        return e.device_info[k] !== undefined;
      }).map(function (k) { return k + " " + String(e.device_info[k]).slice(0, 16); });
      panel.appendChild(el("p", { cls: "meta", text: "evaluation " + e.id + " on " + e.device + ": " + e.status +
        " (GREEN " + fmt(e.green_seconds, 1) + " s, FAST " + fmt(e.fast_seconds, 1) + " s, " + e.timed + " timings" +
        (facts.length ? "; " + facts.join(", ") : "") + ")" }));
    });
    var checked = d.evaluations.filter(function (e) { return e.checks.length; });
    if (checked.length) panel.appendChild(checksTable(checked[checked.length - 1]));
    else if (d.evaluations.length) panel.appendChild(el("p", { cls: "empty", text: "No GREEN checks stored (" +
      d.evaluations.map(function (e) { return e.device + ": " + e.status; }).join("; ") + ")." }));
    if (d.trials.length) panel.appendChild(el("p", { cls: "meta", text: "trials: " + d.trials.map(function (t) {
      return t.study + " #" + t.number + " " + t.state + (t.value === null ? "" : " " + ratio(t.value));
    }).join(", ") }));
    var src = el("details", {}, el("summary", { text: "Kernel source (" + d.source_note + ")" }));
    if (d.source) src.appendChild(el("pre", { cls: "source", text: d.source.map(function (i) { return graph.lines[i]; }).join("\n") }));
    panel.appendChild(src);
  }

  function select(id) {
    if (!byId[id]) return;
    show(id);
    if (lineageDiv && highlightTrace >= 0) {
      Plotly.restyle(lineageDiv, { x: [[byId[id].x]], y: [[byId[id].y]] }, [highlightTrace]);
    }
    window.evoSelected = id;
    if (history.replaceState) history.replaceState(null, "", "#node=" + id.slice(0, 12));  // a link to this node
  }

  function search(text) {
    var q = text.trim().toLowerCase();
    if (!q) return;
    var hit = graph.nodes.filter(function (n) { return n.id.indexOf(q) === 0; })[0] ||
              graph.nodes.filter(function (n) { return n.label.toLowerCase().indexOf(q) >= 0; })[0];
    if (hit) select(hit.id);
  }

  function countPoints(trace) {
    if (trace.type === "heatmap") {
      return (trace.z || []).reduce(function (s, row) {
        return s + row.filter(function (v) { return v !== null; }).length;
      }, 0);
    }
    return (trace.x || []).filter(function (v) { return v !== null; }).length;
  }

  function summarize() {
    var plots = {};
    var lineageNodes = 0;
    document.querySelectorAll("div.plot").forEach(function (div) {
      var data = div.data || [];
      var marks = div.querySelectorAll(".scatterlayer .point, .barlayer .point, .hm image, .scatterlayer .js-line").length;
      plots[div.dataset.figure] = { traces: data.length, points: data.reduce(function (s, t) { return s + countPoints(t); }, 0),
                                    marks: marks };
      if (div.dataset.figure === "lineage") {
        data.forEach(function (t) { if (t.meta === "nodes") lineageNodes += t.x.length; });
      }
    });
    var bottoms = {};
    document.querySelectorAll("section[id]").forEach(function (sec) {
      bottoms[sec.id] = Math.ceil(sec.getBoundingClientRect().bottom + window.scrollY);
    });
    var summary = { plots: plots, lineage_nodes: lineageNodes, graph_nodes: graph.nodes.length,
                    selected: window.evoSelected || null, errors: window.evoErrors,
                    panel: (document.querySelector("#panel h3") || {}).textContent || null,
                    height: document.documentElement.scrollHeight, section_bottoms: bottoms };
    document.getElementById("evo-report-summary").textContent = JSON.stringify(summary);
  }

  function draw(div) {
    var fig = figures[div.dataset.figure];
    var isLineage = div.dataset.figure === "lineage";
    var data = fig.data;
    if (isLineage) {  // a ring that marks the selected node
      data = data.concat([{ type: "scatter", mode: "markers", name: "selected", showlegend: false, hoverinfo: "skip",
                            x: [], y: [], marker: { size: 30, color: "rgba(0,0,0,0)", line: { color: "#111", width: 2.5 } } }]);
      highlightTrace = data.length - 1;
    }
    return Plotly.newPlot(div, data, fig.layout, { responsive: true, displaylogo: false, scrollZoom: isLineage })
      .then(function () {
        if (!isLineage) return;
        lineageDiv = div;
        div.on("plotly_click", function (ev) {
          var p = ev.points && ev.points[0];
          if (p && p.data.meta === "nodes") select(p.customdata);
        });
      });
  }

  var plots = Array.prototype.slice.call(document.querySelectorAll("div.plot"));
  var searchBox = document.getElementById("node-search");
  if (searchBox) searchBox.addEventListener("keydown", function (e) { if (e.key === "Enter") search(searchBox.value); });
  Promise.all(plots.map(draw)).then(function () {
    var wanted = /^#node=(.+)$/.exec(location.hash);  // a link to a node (what select() writes)
    if (wanted) search(decodeURIComponent(wanted[1]));
    if (window.evoSelected) return;
    var best = graph.nodes.filter(function (n) { return n.score !== null; })
      .sort(function (a, b) { return b.score - a.score; })[0] || graph.nodes[0];
    if (best) select(best.id);
  }).catch(function (err) {
    window.evoErrors.push("render failed: " + String(err && err.stack || err));
  }).then(summarize);
})();
