// marin_lab browser: one page, hash routes, data rendered with textContent only (never innerHTML),
// so a document holding "<script>" is displayed as text and never runs.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const STATUSES = ["SUCCESS", "RUNNING", "WAITING", "FAILED", "DEP_FAILED", "CANCELLED", "MISSING", "CORRUPT"];
const app = () => document.getElementById("app");

// ---- DOM helpers ----------------------------------------------------------------------------
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = String(value);
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, String(value));
  }
  append(node, children);
  return node;
}
function append(node, children) {
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}
function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined) continue;
    if (key === "text") node.textContent = String(value);
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, String(value));
  }
  for (const child of children.flat()) if (child) node.appendChild(child);
  return node;
}
function badge(status, count) {
  const s = STATUSES.includes(status) ? status : "WAITING";
  return el("span", {class: `badge ${s}`, "data-status": status, text: count === undefined ? status : `${status} ${count}`});
}
function plural(n, word) { return `${n} ${word}${n === 1 ? "" : "s"}`; }
function pretty(value) { return JSON.stringify(value, null, 2); }
function pre(value, cls) { return el("pre", {class: cls || "", text: typeof value === "string" ? value : pretty(value)}); }
function fmtBytes(n) {
  if (typeof n !== "number") return "";
  const units = ["B", "KB", "MB", "GB", "TB"]; let i = 0; let v = n;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return `${v.toFixed(i ? 1 : 0)} ${units[i]}`;
}
function kv(pairs) {
  const dl = el("dl", {class: "kv"});
  for (const [k, v] of pairs) {
    if (v === null || v === undefined || v === "") continue;
    dl.appendChild(el("dt", {text: k}));
    dl.appendChild(el("dd", {}, v instanceof Node ? v : String(v)));
  }
  return dl;
}
function fmtDuration(s) {
  if (typeof s !== "number") return "";
  if (s < 60) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
  return `${Math.floor(s / 3600)} h ${Math.round((s % 3600) / 60)} min`;
}
const ACTIVE = new Set(["RUNNING", "WAITING"]);
// A running step's latest line, or what a queued one waits for.
const liveLine = (s) => (s.status === "RUNNING" ? s.progress : s.status === "WAITING" ? s.waiting_for : null) || null;
// One poller for the page on screen: a page that shows running work asks again every POLL_MS.
const POLL_MS = 2000;
let poller = null;
function poll(fn) {
  const token = {};
  poller = token;
  const tick = async () => {
    if (poller !== token) return;
    let again = false;
    try { again = await fn(); } catch (e) { again = true; }
    if (again && poller === token) setTimeout(tick, POLL_MS);
  };
  setTimeout(tick, POLL_MS);
}
function stepRunText(s) {
  const parts = [];
  if (s.run) parts.push(s.run === "executed" ? "executed in this run" : "reused");
  if (s.produced_by && s.run !== "executed") parts.push(`by the run of ${(s.produced_by.started || "?").slice(0, 19)}`);
  if (typeof s.duration_s === "number") parts.push(fmtDuration(s.duration_s));
  else if (s.status === "RUNNING" && s.driver_gone_since) parts.push(`driver gone since ${s.driver_gone_since}`);
  else if (s.status === "RUNNING" && typeof s.elapsed_s === "number") parts.push(`running ${fmtDuration(s.elapsed_s)}`);
  return parts.join(" · ");
}
function q(params) { return new URLSearchParams(params).toString(); }
const links = {
  experiment: id => `#/experiment/${encodeURIComponent(id)}`,
  step: (path, exp) => `#/step?${q(exp ? {path, exp} : {path})}`,
  diff: (a, b) => `#/diff${a || b ? "?" + q(Object.assign(a ? {a} : {}, b ? {b} : {})) : ""}`,
  // ctx {exp, step}: where the reader came from, kept so a deep link keeps its breadcrumb.
  file: (path, cursor, page, ctx) => `#/files?${q(Object.assign({path}, cursor ? {cursor, page: page || 1} : {},
    ctx && ctx.exp ? {exp: ctx.exp} : {}, ctx && ctx.step ? {step: ctx.step} : {}))}`,
};
function crumbs(...items) {
  const nav = document.getElementById("crumbs");
  nav.replaceChildren();
  items.filter(Boolean).forEach(([label, href], i) => {
    if (i) nav.appendChild(document.createTextNode(" / "));
    nav.appendChild(href ? el("a", {href, text: label}) : el("span", {text: label}));
  });
}
function setPage(...children) { app().replaceChildren(...children.flat().filter(Boolean)); }

class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}
async function api(path) {
  const response = await fetch(path, {headers: {Accept: "application/json"}});
  let body = null;
  try { body = await response.json(); } catch (e) { body = null; }
  if (!response.ok) throw new ApiError(response.status, (body && body.error) || response.statusText);
  return body;
}
function showError(err) {
  setPage(el("div", {class: "error", id: "error"},
    el("strong", {text: err.status ? `HTTP ${err.status}: ` : "Error: "}), String(err.message || err)));
}

// ---- experiments list -----------------------------------------------------------------------
async function renderExperiments() {
  crumbs(["experiments", null]);
  const data = await api("/api/experiments");
  document.getElementById("prefix").textContent = data.prefix;
  if (!data.experiments.length) {
    setPage(el("h1", {text: "Experiments"}),
      el("p", {class: "muted", text: `No experiments under ${data.prefix}/experiments/ yet. Run an experiment script, then reload.`}));
    return;
  }
  const row = exp => el("tr", {class: `experiment-row${exp.siblings > 1 ? " sibling" : ""}`, "data-id": exp.id},
    el("td", {}, el("a", {href: links.experiment(exp.id), class: "experiment-link", text: exp.name || exp.id}),
      el("div", {class: "muted mono", text: exp.id})),
    el("td", {class: "mono", text: exp.created || "—"}),
    el("td", {class: "num", text: exp.steps}),
    el("td", {}, exp.state !== "ok" ? badge("CORRUPT") : null,
      Object.entries(exp.status_counts || {}).map(([s, n]) => badge(s, n))),
    el("td", {class: "differs"}, exp.previous ? [...(exp.differs || []).map(line => el("div", {class: "mono", text: line})),
      el("a", {href: links.diff(exp.previous, exp.id), class: "diff-link", text: `against ${exp.previous}`})] : null),
    el("td", {}, exp.state !== "ok" ? el("span", {class: "muted", text: `${exp.state}: ${exp.error}`}) : (exp.description || "")));
  // Every edit of a script is a new record: the records of one script together under its path,
  // newest first, each saying what it differs by from the one before it.
  const groups = new Map();
  for (const exp of data.experiments) {
    const key = exp.siblings > 1 ? `script:${exp.script}` : `id:${exp.id}`;
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(exp);
  }
  const rows = [...groups.values()].flatMap(members => members.length < 2 ? members.map(row) : [
    el("tr", {class: "script-group", "data-script": members[0].script}, el("td", {colspan: 6},
      el("strong", {class: "mono", text: members[0].script}), ` · ${plural(members.length, "version")} of this script · `,
      el("a", {href: links.diff(members[1].id, members[0].id), class: "diff-link", text: "compare the two newest"}))),
    ...members.map(row)]);
  setPage(el("h1", {text: "Experiments"}),
    el("p", {}, el("a", {href: links.diff("", ""), id: "diff-page-link", text: "Compare two experiments"}),
      el("span", {class: "muted", text: " · of one script or of two: their steps, versions and fields side by side"})),
    el("table", {id: "experiments"},
      el("thead", {}, el("tr", {}, ["Experiment", "Created", "Steps", "Status", "Differs from the version before", "Description"].map(h => el("th", {text: h})))),
      el("tbody", {}, rows)));
}

// ---- experiment page with the DAG -----------------------------------------------------------
// The last run on each node: reused or executed, how long it took, what it wrote; a failed step's
// first error line instead (whole in the node's tooltip).
function nodeMeta(step) {
  if (step.status === "FAILED" && step.error) return step.error.length > 34 ? step.error.slice(0, 33) + "…" : step.error;
  const parts = [];
  if (step.group) parts.push(`${step.members.length} steps`);
  else if (step.run) parts.push(step.run);
  if (typeof step.duration_s === "number") parts.push(fmtDuration(step.duration_s));
  if (typeof step.bytes === "number") parts.push(fmtBytes(step.bytes));
  return parts.join(" · ");
}
function nodeTitle(step) {
  if (step.group) return `${step.name}: ${step.members.length} steps (click to expand)\n` +
    Object.entries(step.counts).map(([st, n]) => `${n} ${st}`).join(", ") + (step.error ? `\n${step.error}` : "");
  return [step.identity || step.name, step.status, step.fn, step.run, step.error].filter(Boolean).join("\n");
}
// Steps grouped by the first part of their name ("tokenize/en", "tokenize/de" -> "tokenize"):
// the prefixes shared by two or more steps.
function prefixGroups(steps) {
  const groups = new Map();
  for (const st of steps) {
    const i = st.name.indexOf("/");
    if (i <= 0) continue;
    const prefix = st.name.slice(0, i);
    if (!groups.has(prefix)) groups.set(prefix, []);
    groups.get(prefix).push(st.key);
  }
  return new Map([...groups].filter(([, keys]) => keys.length > 1));
}
// The most telling status of a group: a failure first, then work in flight, then done.
const GROUP_STATUS_ORDER = ["FAILED", "CORRUPT", "DEP_FAILED", "CANCELLED", "RUNNING", "WAITING", "MISSING", "SUCCESS"];
// The graph as drawn: the experiment's steps with each collapsed prefix as one node.
function graphView(exp, groups, collapsed) {
  if (!collapsed.size) return {steps: exp.steps, graph: exp.graph};
  const nodeOf = new Map();
  for (const prefix of collapsed) for (const key of groups.get(prefix) || []) nodeOf.set(key, `group:${prefix}`);
  const steps = [], made = new Map();
  for (const st of exp.steps) {
    const node = nodeOf.get(st.key);
    if (!node) { steps.push(st); continue; }
    let g = made.get(node);
    if (!g) {
      g = {key: node, group: true, name: `${node.slice(6)}/…`, members: [], counts: {}, duration_s: 0, bytes: 0, dependencies: []};
      made.set(node, g); steps.push(g);
    }
    g.members.push(st.key);
    g.counts[st.status] = (g.counts[st.status] || 0) + 1;
    if (!g.error && st.status === "FAILED" && st.error) g.error = `${st.name}: ${st.error}`;
    if (typeof st.duration_s === "number") g.duration_s += st.duration_s;
    if (typeof st.bytes === "number") g.bytes += st.bytes;
  }
  for (const g of made.values()) g.status = GROUP_STATUS_ORDER.find(st => g.counts[st]) || Object.keys(g.counts)[0];
  const edges = new Map();
  for (const e of exp.graph.edges) {
    const from = nodeOf.get(e.from) || e.from, to = nodeOf.get(e.to) || e.to;
    if (from !== to) edges.set(`${from}\u0000${to}`, {from, to});
  }
  const keys = steps.map(st => st.key);
  return {steps, graph: {...layeredLayout(keys, [...edges.values()], exp.graph.node_width, exp.graph.node_height),
    node_width: exp.graph.node_width, node_height: exp.graph.node_height}};
}
// Longest-path columns, rows in order of appearance: the layout of a collapsed view too big for dagre.
function layeredLayout(keys, edges, w, h) {
  const deps = new Map(keys.map(k => [k, []]));
  for (const e of edges) if (deps.has(e.to) && deps.has(e.from)) deps.get(e.to).push(e.from);
  const layer = new Map();
  const depth = key => {  // iterative: deep chains must not overflow the stack
    const stack = [[key, 0]];
    while (stack.length) {
      const [k, i] = stack[stack.length - 1];
      if (layer.has(k)) { stack.pop(); continue; }
      const ds = deps.get(k);
      if (i < ds.length) { stack[stack.length - 1][1] = i + 1; if (!layer.has(ds[i]) && !stack.some(([x]) => x === ds[i])) stack.push([ds[i], 0]); continue; }
      layer.set(k, 1 + Math.max(-1, ...ds.map(d => layer.has(d) ? layer.get(d) : -1)));
      stack.pop();
    }
    return layer.get(key);
  };
  const rows = new Map(), positions = {};
  for (const k of keys) {
    const col = depth(k), row = rows.get(col) || 0;
    rows.set(col, row + 1);
    positions[k] = {x: col * (w + 70), y: row * (h + 16)};
  }
  const width = (Math.max(0, ...rows.keys()) + 1) * (w + 70) - 70, height = Math.max(1, ...rows.values()) * (h + 16) - 16;
  return {positions, edges, width, height};
}
// Experiments up to this many steps are laid out here by dagre (vendored: static/dagre.min.js),
// which routes every edge around the steps; bigger ones use the server's layered layout, whose
// long edges pass through rows kept free for them (dagre would take seconds there).
const DAGRE_MAX_STEPS = 300;

function layoutGraph(view) {
  const g = view.graph; const w = g.node_width; const h = g.node_height;
  if (window.dagre && view.steps.length <= DAGRE_MAX_STEPS) {
    const d = new dagre.graphlib.Graph();
    d.setGraph({rankdir: "LR", nodesep: 16, ranksep: 70, marginx: 0, marginy: 0});
    d.setDefaultEdgeLabel(() => ({}));
    for (const key of Object.keys(g.positions)) d.setNode(key, {width: w, height: h});
    for (const e of g.edges) d.setEdge(e.from, e.to);
    dagre.layout(d);
    const positions = {};
    for (const key of d.nodes()) { const n = d.node(key); positions[key] = {x: n.x - w / 2, y: n.y - h / 2}; }
    const edges = g.edges.map(e => ({from: e.from, to: e.to, points: d.edge(e.from, e.to).points.map(p => [p.x, p.y]), straight: true}));
    const size = d.graph();
    return {positions, edges, width: Math.max(size.width || w, w), height: Math.max(size.height || h, h), engine: "dagre"};
  }
  const edges = g.edges.map(e => {
    const a = g.positions[e.from], b = g.positions[e.to];
    return {from: e.from, to: e.to, points: [[a.x + w, a.y + h / 2], ...(e.points || []), [b.x, b.y + h / 2]]};
  });
  return {positions: g.positions, edges, width: g.width, height: g.height, engine: "layered"};
}

function edgePath(points, straight) {
  let d = `M ${points[0][0]} ${points[0][1]}`;
  for (let i = 1; i < points.length; i++) {
    const [x1, y1] = points[i - 1], [x2, y2] = points[i];
    // Between columns a curve with level ends; across a column (a kept-free row) a straight run.
    if (straight || y1 === y2) d += ` L ${x2} ${y2}`;
    else { const mx = (x1 + x2) / 2; d += ` C ${mx} ${y1}, ${mx} ${y2}, ${x2} ${y2}`; }
  }
  return d;
}

const READABLE_SCALE = 0.85;   // node labels are 12px text: below ~10px they cannot be read
const GRAPH_MAX_HEIGHT = 720;

// The DAG with the last run on it; groups of steps collapse by name prefix; a selection (Shift- or
// Ctrl-click, or Space on a focused node) filters the steps table below.
function drawGraph(exp) {
  const groups = prefixGroups(exp.steps);
  const collapsed = new Set(), selected = new Set();
  const wrap = el("div", {class: "graph-wrap"});
  let dag = null;
  const render = () => {
    dag = dagSvg(exp, graphView(exp, groups, collapsed), {
      open: node => {
        if (node.group) { collapsed.delete(node.key.slice(6)); groupBox.checked = collapsed.size > 0; render(); return; }
        if (node.output_path) location.hash = links.step(node.output_path, exp.id);
      },
      select: node => {
        const keys = node.group ? node.members : [node.key];
        const on = !keys.every(k => selected.has(k));
        for (const k of keys) on ? selected.add(k) : selected.delete(k);
        filter();
      }});
    wrap.replaceChildren(dag.root);
    requestAnimationFrame(dag.openView);
    filter();
  };
  const search = el("input", {id: "graph-search", type: "search", placeholder: "filter steps by name", oninput: () => filter()});
  const statusSel = el("select", {id: "graph-status", onchange: () => filter()},
    el("option", {value: "", text: "any status"}), STATUSES.map(st => el("option", {value: st, text: st})));
  const count = el("span", {id: "graph-count", class: "muted"});
  const groupBox = el("input", {type: "checkbox", id: "graph-group", disabled: groups.size ? null : "",
    onchange: ev => { collapsed.clear(); if (ev.target.checked) for (const p of groups.keys()) collapsed.add(p); render(); }});
  const clear = el("button", {id: "graph-clear", hidden: "", onclick: () => { selected.clear(); filter(); }, text: "clear selection"});
  const filter = () => {
    const text = search.value.trim().toLowerCase(); const want = statusSel.value; let shown = 0;
    const hidden = new Set();
    for (const s of exp.steps) {
      const ok = (!text || s.name.toLowerCase().includes(text) || (s.identity || "").toLowerCase().includes(text))
        && (!want || s.status === want) && (!selected.size || selected.has(s.key));
      if (!ok) hidden.add(s.key); else shown++;
    }
    if (dag) dag.root.querySelectorAll(".node").forEach(n => {
      const keys = n.dataset.members ? n.dataset.members.split("\n") : [n.dataset.key];
      n.classList.toggle("dim", keys.every(k => hidden.has(k)));
      n.classList.toggle("selected", keys.some(k => selected.has(k)));
    });
    if (dag) dag.root.querySelectorAll("path.edge").forEach(p => p.classList.toggle("dim", dag.hiddenEnd(p, hidden)));
    document.querySelectorAll("#steps tbody tr").forEach(tr => { tr.hidden = hidden.has(tr.dataset.key); });
    const parts = [];
    if (selected.size) parts.push(`${selected.size} selected`);
    if (text || want || selected.size) parts.push(`${shown} of ${plural(exp.steps.length, "step")} match`);
    count.textContent = parts.join(" · ");
    clear.hidden = !selected.size;
  };
  const controls = el("div", {class: "graph-controls"}, search, statusSel,
    el("label", {title: "one node per name prefix shared by several steps"}, groupBox, " group by name prefix"),
    el("button", {id: "graph-fit", onclick: () => dag.fit(), text: "Fit to width"}),
    el("button", {id: "graph-last", onclick: () => dag.openView(), text: "Last steps"}), el("button", {id: "graph-actual", onclick: () => dag.actual(), text: "1:1"}),
    el("button", {onclick: () => dag.zoom(1 / 1.3), text: "+"}), el("button", {onclick: () => dag.zoom(1.3), text: "−"}), clear, count);
  render();
  return el("div", {}, controls, wrap);
}

// One drawing of a graph view: the SVG with pan (drag), zoom (wheel, buttons) and fit, all by moving
// the viewBox. actions.open(node): a click or Enter; actions.select(node): Shift/Ctrl-click or Space.
function dagSvg(exp, view, actions) {
  const L = layoutGraph(view); const pad = 12; const w = view.graph.node_width; const h = view.graph.node_height;
  const byKey = Object.fromEntries(view.steps.map(s => [s.key, s]));
  const full = {x: -pad, y: -pad, w: L.width + 2 * pad, h: L.height + 2 * pad};
  const root = svg("svg", {class: "dag", id: "dag", "data-engine": L.engine, width: "100%",
    height: Math.min(full.h, 560), preserveAspectRatio: "xMinYMin meet", role: "img", "aria-label": "step graph"});
  root.appendChild(svg("defs", {}, svg("marker", {id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5,
    markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse"}, svg("path", {d: "M 0 0 L 10 5 L 0 10 z", fill: "#9aa3b2"}))));
  const edges = svg("g", {class: "edges"});
  for (const e of L.edges) {
    edges.appendChild(svg("path", {class: "edge", d: edgePath(e.points, e.straight),
      "marker-end": "url(#arrow)", "data-from": e.from, "data-to": e.to}));
  }
  root.appendChild(edges);
  let dragged = false;
  const nodes = svg("g", {class: "nodes"});
  for (const [key, p] of Object.entries(L.positions)) {
    const step = byKey[key];
    const status = STATUSES.includes(step.status) ? step.status : "WAITING";
    const label = step.name.length > 28 ? step.name.slice(0, 27) + "…" : step.name;
    const node = svg("g", {class: `node ${status}${step.group ? " group" : ""}`, "data-key": key, "data-status": step.status,
      "data-name": step.name.toLowerCase(), "data-x": p.x, "data-y": p.y, "data-w": w, "data-h": h,
      "data-run": step.run || null, "data-bytes": typeof step.bytes === "number" ? step.bytes : null,
      "data-members": step.group ? step.members.join("\n") : null,
      transform: `translate(${p.x},${p.y})`, tabindex: 0, role: "link",
      onclick: ev => { if (dragged) return; (ev.shiftKey || ev.ctrlKey || ev.metaKey ? actions.select : actions.open)(step); },
      onkeydown: ev => {
        if (ev.key === "Enter") actions.open(step);
        else if (ev.key === " ") { ev.preventDefault(); actions.select(step); }
      }},
      svg("title", {text: nodeTitle(step)}),
      svg("rect", {width: w, height: h, fill: `var(--${status})`}),
      svg("text", {x: 10, y: h / 2 + 2, text: label}),
      svg("text", {class: `meta${step.status === "FAILED" && step.error ? " error" : ""}`, x: w - 6, y: h - 4, "text-anchor": "end", text: nodeMeta(step)}));
    nodes.appendChild(node);
  }
  root.appendChild(nodes);

  let view_ = {...full};
  const apply = () => root.setAttribute("viewBox", `${view_.x} ${view_.y} ${view_.w} ${view_.h}`);
  const viewportRatio = () => (root.clientHeight || 1) / (root.clientWidth || 1);
  const fit = () => { view_ = {x: full.x, y: full.y, w: full.w, h: full.w * viewportRatio()}; if (view_.h < full.h && full.h <= 560) view_.h = full.h; apply(); };
  const actual = () => { view_ = {x: full.x, y: full.y, w: root.clientWidth || full.w, h: root.clientHeight || full.h}; apply(); };
  const zoom = (factor, cx, cy) => {
    cx = cx ?? view_.x + view_.w / 2; cy = cy ?? view_.y + view_.h / 2;
    view_ = {x: cx - (cx - view_.x) * factor, y: cy - (cy - view_.y) * factor, w: view_.w * factor, h: view_.h * factor}; apply();
  };
  root.addEventListener("wheel", ev => {
    ev.preventDefault();
    const r = root.getBoundingClientRect();
    zoom(ev.deltaY > 0 ? 1.15 : 1 / 1.15, view_.x + (ev.clientX - r.left) / r.width * view_.w, view_.y + (ev.clientY - r.top) / r.height * view_.h);
  }, {passive: false});
  let start = null;
  root.addEventListener("pointerdown", ev => { start = {x: ev.clientX, y: ev.clientY, view: {...view_}}; dragged = false; });
  root.addEventListener("pointermove", ev => {
    if (!start) return;
    const r = root.getBoundingClientRect(); const dx = ev.clientX - start.x, dy = ev.clientY - start.y;
    if (Math.abs(dx) + Math.abs(dy) > 3) dragged = true;
    view_ = {...start.view, x: start.view.x - dx / r.width * start.view.w, y: start.view.y - dy / r.height * start.view.h}; apply();
  });
  window.addEventListener("pointerup", () => { start = null; setTimeout(() => { dragged = false; }, 0); });
  apply();
  // The last layer: the steps a run ends in (the trained and evaluated models), what a reader looks for first.
  const lastLayer = () => {
    const ps = Object.values(L.positions); const right = Math.max(...ps.map(p => p.x));
    const last = ps.filter(p => p.x >= right - 1);
    const top = Math.min(...last.map(p => p.y)), bottom = Math.max(...last.map(p => p.y)) + h;
    return {x: right - pad, y: top - pad, w: w + 2 * pad, h: bottom - top + 2 * pad};
  };
  // Open fitted on the last layer, at a scale where step names can be read: never below READABLE_SCALE
  // unless the last layer needs it to be seen whole. A DAG wider than the page opens at its right
  // end, the earlier steps to the left to pan to ("Fit to width" shows it whole); a taller one
  // opens centred on the last layer.
  const openView = () => {
    const cw = root.clientWidth || full.w; const box = lastLayer();
    const scale = Math.min(Math.max(READABLE_SCALE, Math.min(1, cw / full.w)), GRAPH_MAX_HEIGHT / box.h, cw / box.w);
    root.setAttribute("height", Math.round(Math.min(Math.max(full.h * scale, 160), GRAPH_MAX_HEIGHT)));
    const vw = cw / scale, vh = (root.clientHeight || full.h * scale) / scale;
    const y = vh >= full.h ? full.y : Math.min(Math.max(box.y + box.h / 2 - vh / 2, full.y), full.y + full.h - vh);
    view_ = {x: vw >= full.w ? full.x : full.x + full.w - vw, y, w: vw, h: vh}; apply();
    root.dataset.opened = "last-layer";
  };
  // An edge is dimmed when either end shows nothing that matches (a group: none of its members).
  const membersOf = key => byKey[key] && byKey[key].group ? byKey[key].members : [key];
  const hiddenEnd = (path, hidden) => [path.dataset.from, path.dataset.to].some(k => membersOf(k).every(m => hidden.has(m)));
  return {root, fit, actual, zoom, openView, hiddenEnd};
}

async function renderExperiment(id) {
  crumbs(["experiments", "#/"], [id, null]);
  const t0 = performance.now();
  const exp = await api(`/api/experiments/${encodeURIComponent(id)}`);
  const t1 = performance.now();
  document.body.dataset.apiMs = (t1 - t0).toFixed(1);
  const header = [el("h1", {text: exp.name || id})];
  if (exp.state !== "ok") {
    setPage(header, el("div", {class: "warn", id: "corrupt", text: `The experiment file ${exp.file} is ${exp.state}: ${exp.error}`}),
      el("p", {}, el("a", {href: links.file(exp.file), text: "Open the file"})));
    return;
  }
  const legend = el("div", {class: "legend"}, STATUSES.map(s => badge(s)));
  const table = el("table", {id: "steps"},
    el("thead", {}, el("tr", {}, ["Step", "Status", "Run", "Function", "Depends on"].map(h => el("th", {text: h})))),
    el("tbody", {}, exp.steps.map(s => el("tr", {"data-key": s.key},
      el("td", {}, s.output_path ? el("a", {href: links.step(s.output_path, exp.id), text: s.identity || s.name}) : (s.identity || s.name),
        s.artifact ? el("div", {class: "muted mono artifact"}, `${s.artifact.address} · fingerprint ${s.artifact.fingerprint}`,
          s.artifact.drift ? el("span", {class: "warn drift", text: ` · drift: built from ${s.artifact.built_fingerprint}, reused`}) : null) : null),
      el("td", {class: "status-cell"}, badge(s.status), liveLine(s) ? el("div", {class: "muted mono progress", text: liveLine(s)}) : null),
      el("td", {class: "run-cell", text: stepRunText(s)}),
      el("td", {class: "mono", text: s.fn || ""}),
      el("td", {class: "num", text: s.dependencies.length})))));
  setPage(header,
    el("p", {id: "status-counts"}, Object.entries(exp.status_counts).map(([s, n]) => badge(s, n))),
    // What the person watching needs first: the graph, at a size where its names can be read.
    el("h2", {text: `Graph (${plural(exp.steps.length, "step")})`}), legend, drawGraph(exp),
    launchSection(exp.launch),
    kv([["script", exp.script], ["created", exp.created], ["hash", exp.hash], ["description", exp.description],
        ["git", exp.git ? `${exp.git.commit || "?"}${exp.git.dirty ? " (dirty)" : ""}` : null],
        ["command line", exp.command_line ? exp.command_line.join(" ") : null],
        ["file", el("a", {href: links.file(exp.file), text: exp.file})]]),
    el("p", {}, el("a", {id: "compare-link", href: compareLink(id), text: "Compare runs"}),
      el("span", {class: "muted", text: " · the metrics of this experiment's training steps, overlaid on one chart · "}),
      el("a", {id: "diff-with-link", href: links.diff(id, ""), text: "Compare with another experiment"})),
    // A long table costs more layout than the graph; fold it away on big experiments.
    el("h2", {text: "Steps"}), exp.steps.length > 200 ? el("details", {}, el("summary", {text: `show all ${exp.steps.length} steps`}), table) : table,
    el("div", {id: "cost"}, el("p", {class: "muted", text: "Loading the cost…"})),
    runsSection(exp.runs),
    codeSection(exp.code));
  // Timings for benchmarks/browser_latency.py: fetch+parse vs building the DOM.
  document.body.dataset.renderMs = (performance.now() - t1).toFixed(1);
  fillCost(id);  // cost.js: read after the page is drawn, so the graph never waits for it
  if (exp.steps.some(st => ACTIVE.has(st.status))) poll(() => refreshExperiment(id));
}

// While anything runs: statuses, durations and progress updated in place (the graph keeps its view).
async function refreshExperiment(id) {
  const exp = await api(`/api/experiments/${encodeURIComponent(id)}`);
  if (exp.state !== "ok") return false;
  for (const s of exp.steps) {
    const status = STATUSES.includes(s.status) ? s.status : "WAITING";
    const node = document.querySelector(`#dag .node[data-key="${CSS.escape(s.key)}"]`);
    if (node) {  // a step drawn on its own (one in a collapsed group shows again when the page is opened anew)
      STATUSES.forEach(st => node.classList.remove(st));
      node.classList.add(status);
      node.dataset.status = s.status;
      if (s.run) node.dataset.run = s.run;
      node.querySelector("rect").setAttribute("fill", `var(--${status})`);
      node.querySelector("title").textContent = nodeTitle(s);
      const meta = node.querySelector("text.meta");
      if (meta) { meta.textContent = nodeMeta(s); meta.classList.toggle("error", s.status === "FAILED" && !!s.error); }
    }
    const row = document.querySelector(`#steps tr[data-key="${CSS.escape(s.key)}"]`);
    if (row) {
      row.querySelector(".status-cell").replaceChildren(badge(s.status),
        liveLine(s) ? el("div", {class: "muted mono progress", text: liveLine(s)}) : "");
      row.querySelector(".run-cell").textContent = stepRunText(s);
    }
  }
  const counts = document.getElementById("status-counts");
  if (counts) counts.replaceChildren(...Object.entries(exp.status_counts).map(([st, n]) => badge(st, n)));
  return exp.steps.some(st => ACTIVE.has(st.status));
}

// A run started by `marin-lab launch`: its driver attempts, why each ended, and each one's log.
function launchSection(launch) {
  if (!launch) return null;
  const head = el("h2", {text: `Driver attempts (launched run ${launch.run_id})`});
  if (launch.state !== "ok") return el("div", {id: "launch"}, head, el("p", {class: "warn", text: `${launch.url}: ${launch.state}${launch.error ? ": " + launch.error : ""}`}));
  const rows = launch.attempts.map(a => [String(a.attempt), a.outcome, a.node, a.started, a.ended, a.reason,
    el("a", {href: links.file(a.log), text: "log"})]);
  return el("div", {id: "launch"}, head,
    el("p", {}, badge(launch.status || "RUNNING"), ` ${launch.restarts} restart(s) of ${launch.max_restarts ?? "?"} allowed`,
      launch.message ? el("span", {class: "muted", text: ` · ${launch.message}`}) : null),
    table(["Attempt", "Outcome", "Node", "Started", "Ended", "Why", "Log"], rows, {id: "attempts"}));
}

// Every run of the experiment (its own record under experiments/{id}/runs/), newest first.
function runsSection(runs) {
  if (!runs || !runs.length) return null;
  const counts = c => Object.entries(c || {}).filter(([, n]) => n).map(([k, n]) => `${n} ${k}`).join(", ");
  const rows = runs.map(r => r.state !== "ok" ? [r.file, r.state, "", "", r.error || ""] :
    [r.started || "?", r.outcome || "?", r.ended || "", counts(r.counts), (r.command_line || []).join(" ")]);
  return el("div", {id: "runs"}, el("h2", {text: `Runs (${runs.length})`}),
    table(["Started", "Outcome", "Ended", "Steps", "Command line"], rows, {id: "runs-table"}));
}

function codeSection(code) {
  if (!code) return el("p", {class: "muted", text: "no code provenance recorded (an older record)"});
  const parts = [el("h2", {text: "Code"}),
    kv([["script sha256", code.script_sha256], ["dirty", code.dirty === null || code.dirty === undefined ? null : String(code.dirty)],
        ["uncommitted", code.changed && code.changed.length ? code.changed.join(", ") : null]])];
  if (code.script_text !== undefined) parts.push(el("details", {id: "script"}, el("summary", {text: `script as run (${code.script || "?"})`}), pre(code.script_text, "script-text")));
  else parts.push(el("p", {class: "muted", text: code.script_error || code.script_missing || "the script was not stored"}));
  if (code.diff) parts.push(el("details", {}, el("summary", {text: `uncommitted changes (${code.diff_bytes} bytes${code.diff_truncated ? ", truncated" : ""})`}), pre(code.diff, "diff")));
  return el("div", {id: "code"}, parts);
}

// ---- step page ------------------------------------------------------------------------------
function stepLinks(items, exp) {
  if (!items.length) return el("p", {class: "muted", text: "none"});
  return el("ul", {}, items.map(d => el("li", {},
    d.output_path ? el("a", {href: links.step(d.output_path, exp), text: d.identity || d.name}) : (d.identity || d.name),
    " ", badge(d.status))));
}
function table(headers, rows, attrs) {
  return el("table", attrs || {}, el("thead", {}, el("tr", {}, headers.map(h => el("th", {text: h})))),
    el("tbody", {}, rows.map(r => el("tr", {}, r.map(c => c instanceof Node ? el("td", {}, c) : el("td", {text: c === null || c === undefined ? "" : c}))))));
}
// What one attempt ran on, in a line ("v4-16 × 1 slice, 2 hosts: slice-0"); the whole of it on hover.
function hardwareCell(h) {
  if (!h || typeof h !== "object") return "";
  const names = Array.isArray(h.slice_names) ? `: ${h.slice_names.join(", ")}` : "";
  const text = h.type ? `${h.type} × ${h.slices ?? "?"} slice${h.slices === 1 ? "" : "s"}, ${h.hosts ?? "?"} hosts${names}`
    : short(h);
  return el("span", {class: "hardware", title: JSON.stringify(h, null, 1), text});
}
function short(value) {
  if (value === null || value === undefined) return "—";
  const s = typeof value === "string" ? JSON.stringify(value) : JSON.stringify(value);
  return s.length > 300 ? s.slice(0, 299) + "…" : s;
}
function explainTable(changes) {
  const rows = [];
  const walk = (list, depth, dep) => {
    for (const c of list) {
      rows.push(el("tr", {},
        el("td", {class: "mono", text: "  ".repeat(depth) + (depth ? `↳ ${dep}: ` : "") + c.field}),
        el("td", {class: c.change, text: c.change}),
        el("td", {class: "mono", text: short(c.old)}),
        el("td", {class: "mono", text: short(c.new)})));
      if (c.because && c.because.changes) walk(c.because.changes, depth + 1, c.because.dependency);
    }
  };
  walk(changes, 0, "");
  return el("table", {id: "explain"}, el("thead", {}, el("tr", {}, ["Field", "Change", "Other version", "This step"].map(h => el("th", {text: h})))),
    el("tbody", {}, rows));
}

async function renderStep(params) {
  const path = params.get("path"); const exp = params.get("exp");
  crumbs(["experiments", "#/"], exp ? [exp, links.experiment(exp)] : null, ["step", null]);
  const step = await api(`/api/step?${q(exp ? {path, exp} : {path})}`);
  crumbs(["experiments", "#/"], exp ? [exp, links.experiment(exp)] : null, [step.name || "step", null]);
  const r = step.record;
  const parts = [el("h1", {}, step.identity || step.output_path, " ", badge(step.status))];
  if (step.info.state !== "ok") {
    parts.push(el("div", {class: "warn", id: "record-problem", text: `The step record ${step.info.url} is ${step.info.state}: ${step.info.error}`}));
  }
  const ctx = {exp, step: step.output_path};
  parts.push(kv([["name", step.name], ["output", el("a", {href: links.file(step.output_path, null, null, ctx), text: step.output_path})],
    ["function", r && r.fn], ["description", r && r.description],
    ["artifact", step.artifact ? `${step.artifact.name}@${step.artifact.version}` : null],
    ["fingerprint", step.artifact && step.artifact.fingerprint],
    ["adopted from", step.artifact && step.artifact.source],
    ["started", r && r.timings && r.timings.started], ["ended", r && r.timings && r.timings.ended],
    ["duration", r && r.timings && typeof r.timings.duration_s === "number" ? `${r.timings.duration_s.toFixed(2)} s` : null],
    ["cost", step.cost && step.cost.text]]));
  const live = step.status_file && step.status_file.value;
  if (step.status === "RUNNING" && step.driver_gone_since) {
    parts.push(el("p", {id: "driver-gone", class: "warn",
      text: `RUNNING, driver gone since ${step.driver_gone_since}: nobody runs this step; the next run of its experiment takes it over`}));
  } else if (live && step.status === "WAITING" && live.waiting_for) {
    parts.push(el("p", {id: "waiting-status", class: "muted"}, `attempt ${live.attempt ?? "?"} · ${live.waiting_for}`));
  } else if (live && step.status === "RUNNING") {
    parts.push(el("p", {id: "live-status", class: "muted"}, `attempt ${live.attempt ?? "?"}`,
      live.elapsed_s !== undefined ? ` · running ${fmtDuration(live.elapsed_s)}` : "",
      live.heartbeat ? ` · heartbeat ${live.heartbeat}` : "",
      live.progress ? el("div", {class: "mono progress", text: live.progress}) : null));
  }
  // The curves first: what a training step is opened for, above its result and record.
  if (step.has_metrics || step.has_results) parts.push(el("h2", {text: "Training and evaluation"}),
    exp && step.has_metrics ? el("p", {}, el("a", {id: "compare-link", href: compareLink(exp), text: "Compare with the other runs of this experiment"})) : null,
    el("div", {id: "metrics"}, el("p", {class: "muted", text: "Loading metrics…"})));
  if (r && r.result !== undefined && r.result !== null) parts.push(el("h2", {text: "Result"}), pre(r.result, "result"));
  if (r && r.error) parts.push(el("h2", {text: "Error"}), pre(r.error, "error-text"));
  parts.push(el("h2", {text: "Log"}), el("div", {id: "log-box"}, el("p", {class: "muted", text: "Loading the log…"})));
  parts.push(el("h2", {text: "Dependencies"}), stepLinks(step.dependencies, exp));
  parts.push(el("h2", {text: "Dependents"}), stepLinks(step.dependents, exp));
  if (r) {
    const hist = Array.isArray(r.status_history) ? r.status_history : [];
    parts.push(el("h2", {text: "Status history"}), table(["Status", "Time", "Attempt", "Driver", "Message"],
      hist.map(h => [badge(h.status), h.time, h.attempt, h.driver, h.message]), {id: "status-history"}));
    const attempts = Array.isArray(r.attempts) ? r.attempts : [];
    parts.push(el("h2", {text: "Attempts"}), table(["Attempt", "Kind", "Status", "Started", "Ended", "Hardware", "Error"],
      attempts.map(a => [a.attempt, a.kind, a.status ? badge(a.status) : "", a.started, a.ended, hardwareCell(a.hardware),
                         a.error ? pre(a.error) : ""]), {id: "attempts"}));
    parts.push(el("h2", {text: "What changed (explain)"}));
    const ex = step.explain;
    if (!ex || !ex.against) parts.push(el("p", {class: "muted", id: "explain-none", text: (ex && ex.message) || "no earlier version found"}));
    else {
      parts.push(el("p", {}, ex.newer ? "No earlier version of this step; compared with the newer version " :
        ex.last_run ? "Against this experiment's previous run's version " : "Against the previous version (from any experiment) ",
        el("a", {href: links.step(ex.against_output_path, exp), text: ex.against}), ex.against_started ? ` (started ${ex.against_started})` : "",
        ex.last_run ? ` (run ${ex.last_run})` : ""));
      parts.push(ex.changes.length ? explainTable(ex.changes) : el("p", {class: "muted", text: ex.message}));
    }
    parts.push(el("h2", {text: "Version (hashed)"}), pre(r.version));
    parts.push(el("h2", {text: "Config"}), pre(r.config));
    if (r.unversioned && Object.keys(r.unversioned).length) parts.push(el("h2", {text: "Unversioned fields"}), pre(r.unversioned));
    parts.push(el("h2", {text: "Provenance"}));
    const env = r.environment || {};
    parts.push(kv([["git commit", r.git && r.git.commit], ["git dirty", r.git ? String(!!r.git.dirty) : null],
      ["python", env.python], ["host", env.host], ["platform", env.platform],
      ["accelerators", env.accelerators ? JSON.stringify(env.accelerators) : null],
      ["backend", typeof r.backend === "string" ? r.backend : (r.backend ? JSON.stringify(r.backend) : null)],
      ["driver", typeof r.driver === "string" ? r.driver : (r.driver ? JSON.stringify(r.driver) : null)],
      ["config fingerprint", r.config_fingerprint], ["resources", r.resources ? JSON.stringify(r.resources) : null],
      ["W&B run", wandbLink(r.result && r.result.wandb, ctx)]]));
    if (r.hardware) parts.push(el("details", {}, el("summary", {text: "hardware"}), pre(r.hardware)));
    if (env.packages) parts.push(el("details", {}, el("summary", {text: `packages (${Object.keys(env.packages).length})`}), pre(env.packages)));
    if (env.env) parts.push(el("details", {}, el("summary", {text: "environment variables"}), pre(env.env, "env-vars")));
    const m = r.manifest;
    parts.push(el("h2", {text: "Output manifest"}));
    if (m && Array.isArray(m.files)) {
      parts.push(el("p", {class: "muted", text: `${m.count ?? m.files.length} files, ${fmtBytes(m.total_bytes)}`}));
      parts.push(table(["File", "Size", "sha256"], m.files.slice(0, 2000).map(f => [
        el("a", {href: links.file(`${step.output_path}/${f.path}`, null, null, ctx), class: "manifest-file", text: f.path}),
        fmtBytes(f.size), el("span", {class: "mono", text: (f.sha256 || "").slice(0, 16)})]), {id: "manifest"}));
    } else parts.push(el("p", {class: "muted", text: "no manifest (the step has not finished)"}));
  }
  setPage(parts);
  const tail = await startLog(step.output_path, ctx);
  if (ACTIVE.has(step.status)) {
    poll(async () => {
      await tail();
      const now = await api(`/api/step?${q(exp ? {path, exp} : {path})}`);
      if (now.status !== step.status) {  // a new state: draw the page again where the reader is
        const y = window.scrollY;
        await renderStep(params);
        window.scrollTo(0, y);
        return false;  // renderStep started its own poller if still needed
      }
      const box = document.getElementById("live-status");
      const v = now.status_file && now.status_file.value;
      if (box && v) box.replaceChildren(`attempt ${v.attempt ?? "?"}`,
        v.elapsed_s !== undefined ? ` · running ${fmtDuration(v.elapsed_s)}` : "", v.heartbeat ? ` · heartbeat ${v.heartbeat}` : "",
        v.progress ? el("div", {class: "mono progress", text: v.progress}) : "");
      return true;
    });
  }
  // The previous version of this step (explain's comparison), overlaid on the same charts.
  const ex = step.explain;
  const others = ex && ex.against_output_path ? [{label: ex.against, path: ex.against_output_path}] : [];
  if (step.has_metrics || step.has_results) renderMetrics(step.output_path, others).catch(err => {
    document.getElementById("metrics").replaceChildren(el("div", {class: "error", text: String(err.message || err)}));
  });
}

// The W&B run: its page when the run was online and recorded its URL, else its files in the step's output.
function wandbLink(w, ctx) {
  if (!w || !w.run_id) return null;
  const label = `${w.run_id} (${w.mode})`;
  if (typeof w.url === "string" && /^https:\/\//.test(w.url)) return el("a", {href: w.url, id: "wandb-link", rel: "noreferrer", text: label});
  return w.dir ? el("a", {href: links.file(w.dir, null, null, ctx), id: "wandb-link", text: `${label}: ${w.dir}`}) : label;
}

// The log's tail, then only what was added (the API hands out whole lines from next_offset).
async function startLog(path, ctx) {
  const box = document.getElementById("log-box");
  let offset = null, attempt = null;
  const show = page => {
    if (page.state !== "ok") { box.replaceChildren(el("p", {class: "muted", id: "log-none", text: page.message})); return; }
    const text = el("pre", {id: "log", class: "log", text: page.text});
    box.replaceChildren(el("p", {class: "muted"}, `attempt ${page.attempt} of ${page.attempts.length}`,
      page.start > 0 ? ` · last ${fmtBytes(page.size - page.start)} of ${fmtBytes(page.size)} · ` : " · ",
      el("a", {href: links.file(page.url, null, null, ctx), text: "open the whole log"})), text);
    text.scrollTop = text.scrollHeight;
    offset = page.next_offset; attempt = page.attempt;
  };
  try { show(await api(`/api/log?${q({path})}`)); } catch (err) {
    box.replaceChildren(el("div", {class: "warn", text: String(err.message || err)}));
  }
  return async () => {
    if (offset === null) { show(await api(`/api/log?${q({path})}`)); return; }
    const more = await api(`/api/log?${q({path, attempt, offset})}`);
    const logPre = document.getElementById("log");
    if (more.state === "ok" && more.text && logPre) {
      const atEnd = logPre.scrollTop + logPre.clientHeight >= logPre.scrollHeight - 4;
      logPre.append(more.text);
      if (atEnd) logPre.scrollTop = logPre.scrollHeight;
    }
    if (more.state === "ok") {
      offset = more.next_offset;
      const newest = more.attempts[more.attempts.length - 1];
      if (newest !== attempt) { offset = null; }  // a retry started: follow its log from its start
    }
  };
}

// ---- charts: Observable Plot (static/plot.umd.min.js, vendored with d3 and their licences) ------
// Every chart of every page is drawn here, so each has the same look: ticks and gridlines, each run's
// value under the cursor, a log scale and smoothing from the page's chart controls, many runs overlaid.
const SERIES_COLOURS = 10;  // .series-key.series-0 ... 9 in app.css use these; after ten the lines are dashed
const SERIES_PALETTE = ["#2f6fd6", "#e07b00", "#7a3fc2", "#2e9d57", "#d33b3b", "#0f9bb0", "#b8860b", "#e0529c", "#5b6b82", "#8c564b"];
const SMOOTHING = [0, 0.6, 0.8, 0.9, 0.95, 0.99];
const CHART_MARGIN = {top: 22, right: 14, bottom: 32, left: 56};
const chartPrefs = {logY: false, smoothing: 0};  // the chart controls' choice, for every chart of the page
const liveCharts = new Set();

// Exponential moving average with TensorBoard's debiasing: [step, smoothed, raw] per point.
// A value that is not a finite number (a NaN loss) is a gap in both lines and leaves the average as it was.
function smoothed(points, weight) {
  if (!weight) return points;
  let avg = 0, n = 0;
  return points.map(p => {
    if (!Number.isFinite(p[1])) return [p[0], NaN, p[1]];
    avg = weight * avg + (1 - weight) * p[1];
    n += 1;
    return [p[0], avg / (1 - Math.pow(weight, n)), p[1]];
  });
}

// "log scale" and "smoothing", shared by the charts on the page.
function chartControls() {
  const log = el("input", {type: "checkbox", class: "chart-log", checked: chartPrefs.logY ? "" : null,
    onchange: ev => { chartPrefs.logY = ev.target.checked; redrawCharts(); }});
  const smooth = el("select", {class: "chart-smoothing", onchange: ev => { chartPrefs.smoothing = Number(ev.target.value); redrawCharts(); }},
    SMOOTHING.map(w => el("option", {value: w, text: w ? String(w) : "none", selected: w === chartPrefs.smoothing ? "" : null})));
  return el("div", {class: "graph-controls chart-controls"}, el("label", {}, log, " log scale"), el("label", {}, "smoothing ", smooth));
}
function redrawCharts() {
  for (const c of [...liveCharts]) {
    if (c.box.isConnected) c.draw(); else liveCharts.delete(c);
  }
}

// One chart, several runs overlaid; hovering shows each run's value at the nearest logged step.
// series: [{label, key, points: [[step, value], ...]}]. opts: {width, height, onHover(at, values),
// smoothing, logY, metric (data-metric, when the title says more)}: with onHover the values go to the caller (the compare view lists them in a table)
// and the chart itself shows only the step; smoothing / logY given here override the page's controls.
function linePlot(title, series, opts) {
  const o = opts || {};
  const note = el("span", {class: "chart-note muted"});
  const box = el("div", {class: "plot"}, el("div", {class: "title", text: title}, " ", note));
  const chart = {box, draw: () => {
    const old = box.querySelector("svg.chart");
    const fresh = drawChart(title, series, o);
    if (old) old.replaceWith(fresh); else box.appendChild(fresh);
    note.textContent = fresh.dataset.logRefused ? `log scale off: ${fresh.dataset.logRefused}` : "";
  }};
  chart.draw();
  liveCharts.add(chart);
  return box;
}

// A series that does not move (a constant grad norm; its smoothed float noise) gets a domain around
// its value, so the chart shows a flat line instead of magnifying 1e-16 into the whole height.
function flatDomain(rows, logY) {
  const ys = rows.flatMap(r => [r.value, r.raw]).filter(v => Number.isFinite(v));
  if (!ys.length) return undefined;
  const lo = Math.min(...ys), hi = Math.max(...ys);
  if (hi - lo > 1e-9 * Math.max(1, Math.abs(hi))) return undefined;
  const c = (lo + hi) / 2;
  if (logY) return [c / 1.25, c * 1.25];
  const pad = Math.abs(c) * 0.1 || 1;
  return [c - pad, c + pad];
}

function drawChart(title, series, o) {
  const W = o.width || 380, H = o.height || 200, M = CHART_MARGIN;
  const weight = o.smoothing ?? chartPrefs.smoothing;
  const drawn = series.map(s => smoothed(s.points, weight));
  // Smoothed here: the raw values stay beneath, faint (a caller that smooths itself passes smoothing 0).
  const rows = drawn.flatMap((pts, i) => pts.map(p => ({step: p[0], value: p[1], raw: weight ? p[2] : null, series: i})));
  const wantLog = o.logY ?? chartPrefs.logY;
  const logY = wantLog && rows.every(r => r.value > 0 && (r.raw === null || r.raw > 0));
  const stroke = d => SERIES_PALETTE[d.series % SERIES_COLOURS];
  const line = (data, extra) => Plot.line(data, {x: "step", y: "value", z: "series", stroke, ...extra});
  const solid = rows.filter(r => r.series < SERIES_COLOURS), dashed = rows.filter(r => r.series >= SERIES_COLOURS);
  const raw = rows.filter(r => r.raw !== null).map(r => ({...r, value: r.raw}));
  const single = rows.filter(r => drawn[r.series].length === 1);
  const fig = Plot.plot({
    width: W, height: H, marginTop: M.top, marginRight: M.right, marginBottom: M.bottom, marginLeft: M.left,
    x: {label: "step", grid: true, labelAnchor: "right", labelArrow: "none"},
    y: {type: logY ? "log" : "linear", grid: true, label: null, nice: !logY, domain: flatDomain(rows, logY)},
    marks: [
      raw.length ? line(raw, {strokeWidth: 1, strokeOpacity: 0.25, className: "raw-lines"}) : null,
      solid.length ? line(solid, {strokeWidth: 1.6, className: "series-lines"}) : null,
      dashed.length ? line(dashed, {strokeWidth: 1.6, strokeDasharray: "6 3", className: "series-lines-dashed"}) : null,
      single.length ? Plot.dot(single, {x: "step", y: "value", fill: stroke, r: 2.5}) : null,
    ],
  });
  // Plot puts its base rules in a <style> inside the chart; the CSP admits only app.css (which holds
  // the same rules), so the element goes before the chart reaches the page.
  fig.querySelectorAll("style").forEach(s => s.remove());
  fig.classList.add("chart");
  const xScale = fig.scale("x");
  Object.assign(fig.dataset, {metric: o.metric || title, points: series.length ? series[0].points.length : 0, series: series.length,
    scale: logY ? "log" : "linear", plotLeft: M.left, plotRight: W - M.right});
  if (wantLog && !logY) fig.dataset.logRefused = "values at or below zero";
  // One path per run, in order: named so that a reader (and a test) can tell which is which.
  for (const [cls, rowsOf] of [["series-lines", solid], ["series-lines-dashed", dashed]]) {
    const order = [...new Set(rowsOf.map(r => r.series))];
    fig.querySelectorAll(`g.${cls} path`).forEach((path, k) => {
      const s = series[order[k]];
      if (!s) return;
      path.dataset.label = s.label;
      if (s.key) path.dataset.run = s.key;
      path.dataset.points = s.points.length;
    });
  }
  const cursor = svg("line", {class: "cursor", x1: 0, y1: M.top, x2: 0, y2: H - M.bottom, visibility: "hidden"});
  const readout = svg("text", {class: "readout", x: W - M.right, y: 12, "text-anchor": "end"});
  fig.append(cursor, readout);
  fig.addEventListener("mousemove", ev => {
    const r = fig.getBoundingClientRect();
    const x = xScale.invert((ev.clientX - r.left) * (W / r.width));
    const values = drawn.map(pts => nearestPoint(pts, x));
    const first = values.find(v => v);
    const at = first ? first[0] : Math.round(x);
    const px = xScale.apply(at);
    cursor.setAttribute("x1", px); cursor.setAttribute("x2", px); cursor.setAttribute("visibility", "visible");
    if (o.onHover) { readout.textContent = `step ${at}`; o.onHover(at, values); return; }
    readout.textContent = `step ${at}: ` + values.map((v, i) => `${series.length > 1 ? series[i].label + " " : ""}${v ? fmtValue(v[1]) : "—"}`).join(", ");
  });
  fig.addEventListener("mouseleave", () => {
    cursor.setAttribute("visibility", "hidden"); readout.textContent = "";
    if (o.onHover) o.onHover(null, []);
  });
  return fig;
}
function fmtValue(v) { return Math.abs(v) >= 1e4 || (Math.abs(v) < 1e-2 && v !== 0) ? v.toExponential(2) : +v.toFixed(4); }
// The logged point closest to step x (a scan, not a search: a resumed run may log a step twice).
function nearestPoint(points, x) {
  let best = null;
  for (const p of points) if (best === null || Math.abs(p[0] - x) < Math.abs(best[0] - x)) best = p;
  return best;
}

// The validation losses a training step logs every steps_per_eval: eval/<set>/loss.
const validationKeys = series => Object.keys(series).filter(k => /^eval\/.+\/loss$/.test(k) && series[k].length).sort();
// Training and validation loss of each run on one chart, where a gap between them shows.
function lossSeries(runs) {
  const withValidation = runs.some(r => validationKeys(r.series).length);
  const out = [];
  for (const r of runs) {
    if (r.series.loss && r.series.loss.length) out.push({label: withValidation ? `${r.label} · train` : r.label, points: r.series.loss});
    for (const k of validationKeys(r.series)) out.push({label: `${r.label} · validation ${k.slice(5, -5)}`, points: r.series[k]});
  }
  return out;
}
function lossPlot(series) {
  const validation = series.some(s => s.label.includes(" · validation "));
  const box = linePlot(validation ? "loss: train and validation" : "loss", series, {metric: "loss"});
  if (validation) box.appendChild(el("p", {class: "legend", id: "loss-legend"}, series.map((s, i) =>
    el("span", {class: `series-key series-${i % SERIES_COLOURS}${i >= SERIES_COLOURS ? " dashed" : ""}`, text: s.label}))));
  return box;
}

// `others`: earlier versions of the same step ({label, path}), drawn on the same charts.
async function renderMetrics(path, others) {
  const [data, ...rest] = await Promise.all([api(`/api/metrics?${q({path})}`),
    ...(others || []).map(o => api(`/api/metrics?${q({path: o.path})}`).catch(() => null))]);
  const box = document.getElementById("metrics");
  const out = [];
  const m = data.metrics;
  if (m.state === "ok") {
    const runs = [{label: "this run", series: m.series}, ...(others || []).map((o, i) => ({label: o.label,
      series: rest[i] && rest[i].metrics.state === "ok" ? rest[i].metrics.series : null})).filter(r => r.series)];
    const plots = ["learning_rate", "tokens_per_s", "grad_norm", "mfu"].filter(k => m.series[k] && m.series[k].length);
    const losses = lossSeries(runs);
    out.push(chartControls());
    out.push(el("div", {class: "plots", id: "plots"}, losses.length ? lossPlot(losses) : null, plots.map(k => linePlot(k,
      runs.filter(r => r.series[k] && r.series[k].length).map(r => ({label: r.label, points: r.series[k]}))))));
    if (runs.length > 1) out.push(el("p", {class: "legend", id: "overlay-legend"}, runs.map((r, i) =>
      el("span", {class: `series-key series-${i % SERIES_COLOURS}`, text: r.label}))));
    // Float8 runs: the saturated/flushed fractions, then per-layer amax and fractions.
    const fp8 = Object.keys(m.series).filter(k => k.startsWith("fp8/") && m.series[k].length).sort();
    const fp8Totals = fp8.filter(k => k.split("/").length === 2), fp8Layers = fp8.filter(k => k.split("/").length > 2);
    if (fp8Totals.length) out.push(el("div", {class: "plots", id: "fp8-plots"}, fp8Totals.map(k => linePlot(k, [{label: "this run", points: m.series[k]}]))));
    if (fp8Layers.length) out.push(el("details", {id: "fp8-layers"}, el("summary", {text: `float8 per layer (${fp8Layers.length} series)`}),
      el("div", {class: "plots"}, fp8Layers.map(k => linePlot(k, [{label: "this run", points: m.series[k]}])))));
    out.push(el("p", {class: "muted", text: `${plural(m.rows, "logged step")}${m.bad_lines ? `, ${plural(m.bad_lines, "unreadable line")} skipped` : ""}${m.sampled ? ` (sampled: ${fmtBytes(m.sampled.bytes_read)} read of ${fmtBytes(m.sampled.size)}, in ${m.sampled.windows} evenly spaced windows)` : ""}`}));
  } else if (m.state !== "missing") out.push(el("div", {class: "warn", text: `metrics: ${m.error}`}));
  const res = data.results;
  if (res.state === "ok" && res.value && res.value.marin_lab) out.push(evalStepSection(path));  // evals.js
  else if (res.state === "ok") {
    const v = res.value;
    out.push(el("h3", {text: "Evaluation results"}));
    const rows = [];
    for (const [metric, byset] of Object.entries(v)) {
      if (byset && typeof byset === "object") {
        for (const [name, value] of Object.entries(byset)) {
          if (value && typeof value === "object") rows.push([metric, name, value.accuracy ?? JSON.stringify(value), value.n ?? ""]);
          else rows.push([metric, name, typeof value === "number" ? +value.toFixed(6) : String(value), ""]);
        }
      } else rows.push([metric, "", String(byset), ""]);
    }
    out.push(table(["Metric", "Set / task", "Value", "n"], rows, {id: "results"}));
  } else if (res.state === "corrupt") out.push(el("div", {class: "warn", text: `results.json is corrupt: ${res.error}`}));
  box.replaceChildren(...out);
}

// ---- file viewer ----------------------------------------------------------------------------
function renderItems(page, ctx) {
  switch (page.kind) {
    case "directory":
      return table(["Name", "Type", "Size"], page.items.map(e => [
        el("a", {href: links.file(e.path, null, null, ctx), class: "entry", text: e.name + (e.type === "directory" ? "/" : "")}),
        e.type, e.type === "file" ? fmtBytes(e.size) : ""]), {id: "listing"});
    case "jsonl":
      return el("div", {id: "documents"}, page.items.map(item => {
        const head = el("div", {class: "head"}, `line ${item.line + 1}`);
        if (item.error) return el("div", {class: "doc bad"}, head, el("div", {class: "warn", text: item.error}), pre(item.raw || ""));
        const v = item.value;
        if (v && typeof v === "object" && !Array.isArray(v) && typeof v.text === "string") {
          const rest = Object.assign({}, v); delete rest.text; delete rest.id;
          head.append(" · id ", el("span", {class: "mono", text: String(v.id ?? "")}),
            item.truncated ? ` · text cut at ${v.text.length} of ${item.text_length} chars` : "");
          return el("div", {class: "doc"}, head, el("pre", {class: "text doc-text", text: v.text}),
            Object.keys(rest).length ? el("details", {}, el("summary", {text: "fields"}), pre(rest)) : null);
        }
        return el("div", {class: "doc"}, head, pre(v));
      }));
    case "parquet": {
      const cols = page.schema.map(c => c.name);
      return el("div", {}, el("p", {class: "muted", text: `${page.num_rows} rows in ${page.num_row_groups} row groups; row group ${page.row_group}, from row ${page.first_row}`}),
        table(cols, page.items.map(row => cols.map(c => { const v = row[c]; const s = typeof v === "string" ? v : JSON.stringify(v); return s && s.length > 500 ? s.slice(0, 499) + "…" : s; })), {id: "rows"}),
        el("details", {}, el("summary", {text: "schema"}), pre(page.schema)));
    }
    case "tokens":
      return el("div", {id: "documents"},
        el("p", {class: "muted", text: `${page.documents} documents, dtype ${page.dtype}, vocabulary ${page.vocab_size}, decoded with ${page.tokenizer}`}),
        page.tokenizer_error ? el("div", {class: "warn", text: page.tokenizer_error}) : null,
        page.items.map(d => el("div", {class: "doc"},
          el("div", {class: "head", text: `document ${d.document} · ${d.tokens} tokens${d.truncated ? " (first 4096 decoded)" : ""}`}),
          d.text !== undefined ? el("pre", {class: "text doc-text", text: d.text}) : null,
          el("details", {}, el("summary", {text: "tokens"}),
            el("div", {class: "pieces"}, (d.pieces || d.ids).map((p, i) => el("span", {title: String(d.ids[i]), text: String(p)})))))));
    case "npy":
      return el("div", {}, el("p", {class: "muted", text: `shape ${JSON.stringify(page.shape)}, dtype ${page.dtype}, from item ${page.first_index}`}),
        page.error ? el("div", {class: "warn", text: page.error}) : null, pre((page.items || []).join(" ")));
    case "json":
      return pre(page.value, "json-view");
    case "binary":
      return el("div", {}, el("p", {class: "muted", text: page.message}), pre(page.hex));
    default:
      return pre(page.text || "", "text-view");
  }
}

async function renderFile(params) {
  const path = params.get("path"); const cursor = params.get("cursor"); const pageNo = Number(params.get("page") || 1);
  const ctx = {exp: params.get("exp"), step: params.get("step")};
  const data = await api(`/api/file?${q(cursor ? {path, cursor} : {path})}`);
  // experiments / its experiment / its step / the path below the step: each a link back.
  const inStep = ctx.step && (data.path === ctx.step || data.path.startsWith(ctx.step + "/"));
  const below = inStep ? data.path.slice(ctx.step.length).replace(/^\//, "") : null;
  crumbs(["experiments", "#/"], ctx.exp ? [ctx.exp, links.experiment(ctx.exp)] : null,
    inStep ? [ctx.step.split("/").slice(-2).join("/"), links.step(ctx.step, ctx.exp)] : null,
    inStep ? (below ? [below, null] : ["files", null]) : ["files", null]);
  const pager = el("div", {class: "pager"},
    el("button", {id: "prev-page", disabled: pageNo <= 1 ? "" : null, onclick: () => history.back(), text: "← Previous"}),
    el("span", {id: "page-number", text: `page ${pageNo}`}),
    el("button", {id: "next-page", disabled: data.next_cursor ? null : "",
      onclick: () => { location.hash = links.file(path, data.next_cursor, pageNo + 1, ctx); }, text: "Next page →"}));
  setPage(el("h1", {class: "mono", text: data.path}),
    el("p", {}, el("a", {href: links.file(data.parent, null, null, ctx), id: "parent-link", text: "↑ parent folder"}),
      ` · ${data.kind}${data.compression ? ` (${data.compression})` : ""} · ${fmtBytes(data.size)}`),
    data.error ? el("div", {class: "warn", text: data.error}) : null,
    data.notice ? el("p", {class: "muted", id: "notice", text: data.notice}) : null,
    data.is_step ? el("p", {}, el("a", {href: links.step(data.path), id: "step-link", text: "Open this step's page"})) : null,
    pager, el("div", {id: "viewer", "data-kind": data.kind}, renderItems(data, ctx)));
}

// ---- router ---------------------------------------------------------------------------------
async function route() {
  const hash = location.hash.replace(/^#/, "") || "/";
  const [route, query] = hash.split("?", 2);
  const params = new URLSearchParams(query || "");
  document.body.dataset.ready = "0";
  delete document.body.dataset.paintedMs;
  delete document.body.dataset.compareReady;
  poller = null;
  try {
    if (route === "/" || route === "") await renderExperiments();
    else if (route.startsWith("/compare/")) await renderCompare(decodeURIComponent(route.slice("/compare/".length)), params);
    else if (route.startsWith("/experiment/")) await renderExperiment(decodeURIComponent(route.slice("/experiment/".length)));
    else if (route === "/step") await renderStep(params);
    else if (route === "/diff") await renderDiff(params);
    else if (route === "/files") await renderFile(params);
    else if (route.startsWith("/evals")) await renderEvals(route, params);
    else throw new ApiError(404, `no page ${route}`);
  } catch (err) {
    showError(err);
  }
  document.body.dataset.ready = "1";
  window.scrollTo(0, 0);
  // After the next frame is painted: time since navigation (benchmarks read it; no effect on use).
  requestAnimationFrame(() => setTimeout(() => { document.body.dataset.paintedMs = performance.now().toFixed(1); }, 0));
}
window.addEventListener("hashchange", route);
window.addEventListener("DOMContentLoaded", route);
