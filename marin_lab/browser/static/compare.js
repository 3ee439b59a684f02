// marin_lab browser: the compare view, one metric of several runs on one chart, and the
// compare-experiments page (#/diff?a=A&b=B: two experiment records' steps, versions and fields).
// #/compare/<experiment>?with=<other>&metric=loss&smooth=0.9&vs=<identity>&run=<identity>&run=<identity>:
// the runs of an experiment (and of the experiments in with=, across scripts); the address names the
// choice, so it can be shared; without run= the first MAX_DEFAULT_RUNS runs are shown. vs= plots each run relative to one of them (in %, step by step): paired runs whose curves
// lie on top of each other part there. Uses app.js's
// helpers (el, svg, api, linePlot, ...): both are classic scripts sharing one global scope.
"use strict";

const MAX_DEFAULT_RUNS = 10;

function compareLink(expId, choice) {
  const c = choice || {};
  const params = new URLSearchParams();
  if (c.metric) params.set("metric", c.metric);
  if (c.smooth) params.set("smooth", String(c.smooth));
  if (c.vs) params.set("vs", c.vs);
  for (const w of c.with || []) params.append("with", w);
  for (const r of c.runs || []) params.append("run", r);
  const query = params.toString();
  return `#/compare/${encodeURIComponent(expId)}${query ? "?" + query : ""}`;
}

// With runs of several experiments, each label names its experiment too.
function runLabel(run, experiments) {
  const exp = experiments && experiments.length > 1 ? experiments.find(e => e.id === run.experiment) : null;
  return [exp ? exp.name : null, run.name, run.short, run.label].filter(Boolean).join(" · ");
}

// Smoothing is app.js's `smoothed` (an exponential moving average with its start-up bias removed,
// as TensorBoard's): [step, smoothed, raw] for each point, so a hover can show both.

// Each point as a percentage of `base`'s value at the same step ([step, %, ...the point's columns]);
// steps the base did not log are left out.
function relativeTo(points, base) {
  const at = new Map(base.map(p => [p[0], p[1]]));
  return points.filter(p => at.has(p[0]) && at.get(p[0]) !== 0).map(p => [p[0], 100 * (p[1] / at.get(p[0]) - 1), ...p.slice(1)]);
}

function fmtPercent(v) { return `${v > 0 ? "+" : ""}${v.toFixed(3)}%`; }

// "loss" first, then other losses (eval/.../loss), then the rest by name.
function metricOrder(a, b) {
  const rank = k => (k === "loss" ? 0 : /loss/.test(k) ? 1 : k.startsWith("fp8/") ? 3 : 2);
  return rank(a) - rank(b) || a.localeCompare(b);
}

async function renderCompare(expId, params) {
  crumbs(["experiments", "#/"], [expId, links.experiment(expId)], ["compare runs", null]);
  const withIds = params.getAll("with");
  const [data, listed] = await Promise.all([
    api(`/api/experiments/${encodeURIComponent(expId)}/runs${withIds.length ? "?" + q(withIds.map(w => ["with", w])) : ""}`),
    api("/api/experiments")]);
  const many = data.experiments.length > 1;
  const header = el("h1", {text: `Compare runs: ${data.experiments.map(e => e.name).join(" + ")}`});
  // Runs of another experiment (another script, say) beside these: two learning rates in two files.
  const addSelect = el("select", {id: "compare-with", onchange: () => {
    if (addSelect.value) location.hash = compareLink(expId, {with: [...withIds, addSelect.value]});
  }}, el("option", {value: "", text: "add the runs of another experiment"}),
  listed.experiments.filter(e => e.state === "ok" && !data.experiments.some(x => x.id === e.id)).map(e =>
    el("option", {value: e.id, text: `${e.name} · ${e.id}${e.created ? " · " + e.created.slice(0, 19) : ""}`})));
  const broken = data.experiments.filter(e => e.state !== "ok").map(e => el("div", {class: "warn", text: `${e.id}: ${e.state}: ${e.error}`}));
  if (!data.runs.length) {
    setPage(header, broken, el("p", {class: "muted", id: "compare-none",
      text: `No step of ${many ? "these experiments" : "this experiment"} has logged metrics (metrics.jsonl) yet.`}), addSelect);
    return;
  }
  const byKey = new Map(data.runs.map(r => [r.key, r]));
  const byName = new Map(data.runs.map(r => [r.name, r]));
  // A run is named by its identity (exact) or its name (the latest version of that step).
  const asked = params.getAll("run").map(k => byKey.get(k) || byName.get(k)).filter(Boolean);
  const unknown = params.getAll("run").filter(k => !byKey.has(k) && !byName.has(k));
  const chosen = new Set((params.getAll("run").length ? asked : data.runs.slice(0, MAX_DEFAULT_RUNS)).map(r => r.key));
  let metric = params.get("metric") || "loss";
  const askedSmooth = Number(params.get("smooth") || 0);
  let smooth = SMOOTHING.includes(askedSmooth) ? askedSmooth : 0;
  const askedVs = params.get("vs");
  let vs = askedVs ? ((byKey.get(askedVs) || byName.get(askedVs) || {}).key || "") : "";
  const cache = new Map();  // `${path}\n${metric}` -> the /api/metrics answer (or its error)
  const fetchSeries = run => {
    const key = `${run.output_path}\n${metric}`;
    if (!cache.has(key)) {
      cache.set(key, api(`/api/metrics?${q({path: run.output_path, metric})}`).catch(err => ({error: String(err.message || err)})));
    }
    return cache.get(key);
  };

  const select = el("select", {id: "compare-metric", onchange: () => { metric = select.value; draw(); }});
  const smoothSelect = el("select", {id: "compare-smooth", onchange: () => { smooth = Number(smoothSelect.value); draw(); }},
    SMOOTHING.map(w => el("option", {value: w, text: w ? String(w) : "none", selected: w === smooth ? "" : null})));
  const vsSelect = el("select", {id: "compare-vs", onchange: () => { vs = vsSelect.value; draw(); }},
    el("option", {value: "", text: "none (values)"}),
    data.runs.map(r => el("option", {value: r.key, text: `${r.name} · ${r.short}`, selected: r.key === vs ? "" : null})));
  const checkboxes = data.runs.map(r => el("input", {type: "checkbox", class: "run-choice", "data-run": r.key,
    checked: chosen.has(r.key) ? "" : null, onchange: ev => { ev.target.checked ? chosen.add(r.key) : chosen.delete(r.key); draw(); }}));
  const keyCells = data.runs.map(() => el("span", {class: "series-key"}));
  const pointCells = data.runs.map(() => el("td", {class: "num points-cell"}));
  const setAll = on => { data.runs.forEach((r, i) => { checkboxes[i].checked = on; on ? chosen.add(r.key) : chosen.delete(r.key); }); draw(); };
  const expName = id => (data.experiments.find(e => e.id === id) || {}).name || id;
  const runsTable = el("table", {id: "compare-runs"},
    el("thead", {}, el("tr", {}, ["", many ? "Experiment" : null, "Run", "Config", "Identity", "Status", "Points"].filter(h => h !== null).map(h => el("th", {text: h})))),
    el("tbody", {}, data.runs.map((r, i) => el("tr", {"data-run": r.key, "data-experiment": r.experiment},
      el("td", {}, checkboxes[i]),
      many ? el("td", {}, el("a", {href: links.experiment(r.experiment), class: "mono", text: expName(r.experiment)})) : null,
      el("td", {}, keyCells[i], el("a", {href: links.step(r.output_path, r.experiment), text: r.name})),
      el("td", {text: r.label || ""}), el("td", {class: "mono", title: r.identity || r.key, text: r.short}),
      el("td", {}, badge(r.status)), pointCells[i]))));
  const chartBox = el("div", {id: "compare-chart"});
  const readout = el("div", {id: "compare-readout"});
  const notes = el("div", {id: "compare-notes"});
  setPage(header, broken,
    el("p", {class: "muted", text: `${data.runs.length} runs of ${many ? "these experiments" : "this experiment"} logged metrics${data.more ? ` (${data.more} more not listed)` : ""}. ` +
      "Choose runs and a metric: the address names the choice, so it can be shared. "},
      many ? el("a", {id: "compare-diff-link", href: links.diff(expId, withIds[0]), text: "What differs between the experiments"}) : null),
    unknown.length ? el("div", {class: "warn", id: "compare-unknown", text: `not in ${many ? "these experiments" : "this experiment"}: ${unknown.join(", ")}`}) : null,
    el("div", {class: "graph-controls"}, el("label", {}, "metric ", select), el("label", {}, "smoothing ", smoothSelect),
      el("label", {}, el("input", {type: "checkbox", id: "compare-log", class: "chart-log", checked: chartPrefs.logY ? "" : null,
        onchange: ev => { chartPrefs.logY = ev.target.checked; draw(); }}), " log scale"),
      el("label", {}, "relative to ", vsSelect),
      el("button", {id: "compare-all", onclick: () => setAll(true), text: "all"}),
      el("button", {id: "compare-none-btn", onclick: () => setAll(false), text: "none"}), addSelect),
    runsTable, chartBox, readout, notes);

  let drawing = 0;
  async function draw() {
    const token = ++drawing;
    const runs = data.runs.filter(r => chosen.has(r.key));
    history.replaceState(null, "", compareLink(expId, {with: withIds, runs: runs.map(r => r.key), metric, smooth, vs}));
    document.body.dataset.compareReady = "0";
    const answers = await Promise.all(runs.map(fetchSeries));
    if (token !== drawing) return;  // a newer choice is being drawn
    const keys = new Set(["loss", metric]);
    const problems = [];
    const series = [];
    runs.forEach((r, i) => {
      const a = answers[i];
      const m = a && a.metrics;
      if (!m || m.state !== "ok") { problems.push(`${r.name}: ${(a && a.error) || (m && m.error) || "no metrics"}`); return; }
      (m.keys || []).forEach(k => keys.add(k));
      if (m.bad_lines) problems.push(`${r.name}: ${m.bad_lines} unreadable lines skipped`);
      const points = m.series[metric] || [];
      if (points.length) series.push({key: r.key, label: runLabel(r, data.experiments), points: smoothed(points, smooth)});
      else problems.push(`${r.name}: no ${metric} logged`);
    });
    // Columns of a point after its step: what is plotted first, then what it was made from.
    let columns = smooth ? ["Smoothed", "Raw"] : ["Value"];
    let title = metric;
    const base = vs ? series.find(x => x.key === vs) : null;
    if (vs && !base) problems.push(`relative to ${(byKey.get(vs) || {}).name || vs}: not among the chosen runs with ${metric}; plotting values`);
    if (base) {
      const basePoints = base.points;
      for (const x of series) x.points = relativeTo(x.points, basePoints);
      columns = [`% vs ${byKey.get(vs).name}`, ...columns];
      title = `${metric}: % vs ${byKey.get(vs).name} · ${byKey.get(vs).short}`;
    }
    select.replaceChildren(...[...keys].sort(metricOrder).map(k => el("option", {value: k, text: k, selected: k === metric ? "" : null})));
    const colour = new Map(series.map((s, i) => [s.key, i]));
    data.runs.forEach((r, i) => {
      const c = colour.get(r.key);
      keyCells[i].className = c === undefined ? "series-key none" : `series-key series-${c % SERIES_COLOURS}${c >= SERIES_COLOURS ? " dashed" : ""}`;
      const s = series.find(x => x.key === r.key);
      pointCells[i].textContent = s ? String(s.points.length) : "";
    });
    // Under the cursor: each run's value at the nearest step it logged; elsewhere its last value.
    const showValues = (at, values) => {
      const hovering = at !== null;
      if (!series.length) { readout.replaceChildren(); return; }
      if (!hovering) values = series.map(s => s.points[s.points.length - 1]);
      readout.replaceChildren(el("table", {id: hovering ? "hover-values" : "last-values"},
        el("thead", {}, el("tr", {}, [hovering ? `step ${at}` : "last logged", ...columns, "At step"].map(h => el("th", {text: h})))),
        el("tbody", {}, series.map((s, i) => el("tr", {"data-run": s.key},
          el("td", {}, el("span", {class: `series-key series-${i % SERIES_COLOURS}${i >= SERIES_COLOURS ? " dashed" : ""}`}), s.label),
          columns.map((c, j) => el("td", {class: "num", text: !values[i] ? "—" : base && j === 0 ? fmtPercent(values[i][1]) : String(fmtValue(values[i][j + 1]))})),
          el("td", {class: "num", text: values[i] ? String(values[i][0]) : ""}))))));
    };
    chartBox.replaceChildren(series.length ? linePlot(title, series, {width: 900, height: 360, onHover: showValues, smoothing: 0})
      : el("p", {class: "muted", text: runs.length ? `none of the chosen runs logged ${metric}` : "choose runs above"}));
    showValues(null, []);
    notes.replaceChildren(...problems.map(p => el("div", {class: "muted", text: p})));
    document.body.dataset.compareReady = "1";
  }
  await draw();
}

// ---- compare experiments: #/diff?a=A&b=B ----------------------------------------------------------
const DIFF_WORDS = {changed: "changed", upstream: "changed through its dependencies", added: "only in B", removed: "only in A", same: "the same"};

async function renderDiff(params) {
  crumbs(["experiments", "#/"], ["compare experiments", null]);
  const a = params.get("a") || "", b = params.get("b") || "";
  const listed = await api("/api/experiments");
  const choose = (id, chosen, other) => {
    const select = el("select", {id, onchange: () => { location.hash = id === "diff-a" ? links.diff(select.value, other) : links.diff(other, select.value); }},
      el("option", {value: "", text: "choose an experiment"}),
      listed.experiments.filter(e => e.state === "ok").map(e => el("option", {value: e.id, selected: e.id === chosen ? "" : null,
        text: `${e.name} · ${e.id}${e.created ? " · " + e.created.slice(0, 19) : ""}`})));
    return select;
  };
  const head = [el("h1", {text: "Compare experiments"}),
    el("p", {class: "muted", text: "Two runs of experiment scripts (one script or two): their steps matched by name; for a step " +
      "whose identity differs, the fields of its hashed version that differ."}),
    el("div", {class: "graph-controls"}, el("label", {}, "A ", choose("diff-a", a, b)), el("label", {}, "B ", choose("diff-b", b, a)))];
  if (!a || !b) { setPage(head); return; }
  const d = await api(`/api/experiments/${encodeURIComponent(a)}/diff/${encodeURIComponent(b)}`);
  const cell = (side, field) => side[field] === null || side[field] === undefined ? "" : String(side[field]);
  const header = table(["", "A", "B"], [
    ["experiment", el("a", {href: links.experiment(d.a.id), text: d.a.id}), el("a", {href: links.experiment(d.b.id), text: d.b.id})],
    ...[["script", "script"], ["created", "created"], ["hash", "hash"], ["git commit", "commit"], ["steps", "steps"]].map(([label, f]) => [label, cell(d.a, f), cell(d.b, f)]),
  ], {id: "diff-header"});
  const problems = [d.a, d.b].filter(x => x.state !== "ok").map(x => el("div", {class: "warn", text: `${x.file} is ${x.state}: ${x.error}; its steps are not compared`}));
  const counts = Object.entries(d.counts).map(([c, n]) => `${n} ${DIFF_WORDS[c] || c}`).join(" · ");
  const stepLink = (identity, path, exp) => identity ? (path ? el("a", {href: links.step(path, exp), class: "mono", text: identity}) : el("span", {class: "mono", text: identity})) : "—";
  const differing = d.steps.filter(r => r.change !== "same");
  const same = d.steps.filter(r => r.change === "same");
  setPage(head, header, problems,
    el("p", {}, d.same_script ? "Two runs of one script. " : "Runs of two scripts. ", el("span", {id: "diff-counts", text: counts}), " · ",
      el("a", {id: "diff-overlay", href: compareLink(a, {with: [b]}), text: "overlay their training runs"})),
    differing.length ? el("table", {id: "diff-steps"},
      el("thead", {}, el("tr", {}, ["Step", "Change", "A", "B", "What differs"].map(h => el("th", {text: h})))),
      el("tbody", {}, differing.map(r => el("tr", {"data-step": r.name, "data-change": r.change},
        el("td", {class: "mono", text: r.name}), el("td", {class: r.change, text: DIFF_WORDS[r.change] || r.change}),
        el("td", {}, stepLink(r.a, r.a_output_path, a)), el("td", {}, stepLink(r.b, r.b_output_path, b)),
        el("td", {}, r.fields.map(f => el("div", {class: "mono field", text: f.text})),
          r.more_fields ? el("div", {class: "muted", text: `${r.more_fields} more fields`}) : null)))))
      : el("p", {class: "muted", id: "diff-none", text: "Every step is the same in both."}),
    same.length ? el("details", {id: "diff-same"}, el("summary", {text: `${plural(same.length, "step")} the same in both`}),
      el("ul", {}, same.map(r => el("li", {}, stepLink(r.a, r.a_output_path, a))))) : null);
}
