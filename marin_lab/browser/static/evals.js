// marin_lab browser: the evaluation pages. Every number on them comes formatted from the server
// (marin_lab.evaluation.results, the module `marin-lab evals` prints from): the page computes
// nothing, a cell's colour included (the server's `separation`). Routes:
//   #/evals?tasks=REGEX&rank_on=REGEX          the leaderboard (models x tasks, ranked on the lower bound)
//   #/evals/compare?a=KEY&b=KEY                a paired comparison of two evaluations
//   #/evals/samples?run=KEY&task=T&show=...&other=KEY&cursor=N   the sample viewer
//   #/evals/training?tasks=REGEX               eval/{task}/... scores during training, runs overlaid
// Uses app.js's helpers (el, api, crumbs, setPage, links, q, linePlot): classic scripts, one scope.
"use strict";

const evalLinks = {
  board: params => `#/evals${params && Object.keys(params).length ? "?" + q(params) : ""}`,
  compare: (a, b) => `#/evals/compare?${q({a, b})}`,
  samples: params => `#/evals/samples?${q(params)}`,
  training: params => `#/evals/training${params && Object.keys(params).length ? "?" + q(params) : ""}`,
};

function evalNav(current) {
  const items = [["leaderboard", evalLinks.board()], ["score during training", evalLinks.training()]];
  return el("p", {class: "eval-nav"}, items.map(([label, href]) =>
    label === current ? el("strong", {text: label}) : el("a", {href, text: label})).flatMap((x, i) => i ? [" · ", x] : [x]));
}

function notesList(notes, id) {
  if (!notes || !notes.length) return null;
  return el("ul", {class: "eval-notes warn", id: id || "eval-notes"}, notes.map(n => el("li", {text: n})));
}

// A cell's classes: coloured only where the statistics separate it from another model (its interval
// wholly above or below another's: `separation`), never for a gap within noise.
function cellClass(c) {
  if (!c) return "cell num";
  return "cell num" + (c.capped ? " capped" : "") + (c.low_coverage ? " low-coverage" : "")
    + (c.separation ? ` sep-${c.separation}` : "") + (c.at_chance ? " at-chance" : "");
}

async function renderEvals(route, params) {
  if (route === "/evals" || route === "/evals/") return renderLeaderboard(params);
  if (route === "/evals/compare") return renderEvalCompare(params);
  if (route === "/evals/samples") return renderSamples(params);
  if (route === "/evals/training") return renderTraining(params);
  throw new ApiError(404, `no page ${route}`);
}

async function renderLeaderboard(params) {
  crumbs(["experiments", "#/"], ["evaluations", null]);
  const query = {};
  for (const k of ["tasks", "rank_on", "metric"]) if (params.get(k)) query[k] = params.get(k);
  const data = await api(`/api/evals?${q(query)}`);
  document.getElementById("prefix").textContent = data.prefix;
  const header = [el("h1", {text: "Evaluations"}), evalNav("leaderboard")];
  if (data.empty) {
    setPage(header, el("p", {class: "muted", id: "evals-empty", text: data.empty}));
    return;
  }
  const filter = el("form", {class: "eval-filter", onsubmit: ev => {
    ev.preventDefault();
    const next = {};
    for (const k of ["tasks", "rank_on"]) { const v = ev.target.elements[k].value.trim(); if (v) next[k] = v; }
    location.hash = evalLinks.board(next);
  }}, el("label", {}, "tasks ", el("input", {name: "tasks", value: params.get("tasks") || "", placeholder: "regex"})),
    " ", el("label", {}, "rank on ", el("input", {name: "rank_on", value: params.get("rank_on") || "", placeholder: "regex"})),
    " ", el("button", {type: "submit", text: "Show"}));
  const columns = Object.fromEntries(data.columns.map(c => [c.task, c]));
  const chosen = [];
  const compareButton = el("button", {id: "compare-selected", disabled: true, text: "Compare the two selected",
    onclick: () => { if (chosen.length === 2) location.hash = evalLinks.compare(chosen[0], chosen[1]); }});
  const rows = data.rows.map(r => {
    const run = r.run;
    const pick = el("input", {type: "checkbox", "aria-label": `select ${run.key}`, onchange: ev => {
      if (ev.target.checked) chosen.push(run.key); else chosen.splice(chosen.indexOf(run.key), 1);
      compareButton.disabled = chosen.length !== 2;
    }});
    const model = run.train_path ? el("a", {href: links.step(run.train_path), class: "model-link", text: run.label})
      : el("span", {text: run.label});
    return el("tr", {"data-key": run.key},
      el("td", {class: "num rank", text: r.rank}), el("td", {}, pick),
      el("td", {}, model, el("div", {class: "muted mono"}, el("a", {href: links.step(run.path), text: run.key}))),
      data.tasks.map(t => {
        const c = r.cells[t];
        return el("td", {class: cellClass(c), "data-task": t, title: c ? cellTitle(c) : "not evaluated"},
          c && c.status !== "failed" ? el("a", {href: evalLinks.samples({run: run.key, task: t}), text: c.text})
            : el("span", {text: c ? c.text : "-"}));
      }),
      el("td", {class: "num score", text: r.score === null ? "n/a" : (100 * r.score).toFixed(1)}));
  });
  const allNotes = data.rows.flatMap(r => r.run.notes.map(n => `${r.run.key}: ${n}`));
  setPage(header, filter,
    el("table", {id: "leaderboard", class: "heatmap"},
      el("thead", {}, el("tr", {}, el("th", {text: "rank"}), el("th", {text: ""}), el("th", {text: "model / evaluation"}),
        data.tasks.map(t => el("th", {class: "task", "data-task": t}, columns[t].header.map((line, i) =>
          el("div", {class: i ? "muted column-note" : "", text: line})))),
        el("th", {}, el("div", {text: "score"}), el("div", {class: "muted column-note", text: "mean low"})))),
      el("tbody", {}, rows)),
    el("p", {}, compareButton),
    el("p", {class: "muted", id: "rank-rule", text: data.rank_rule + " (score: that mean, in points)"}),
    el("p", {class: "muted", id: "legend", text: data.legend}),
    notesList(allNotes));
}

function cellTitle(c) {
  const parts = [`${c.metric || ""}`, c.method ? `interval: ${c.method}` : "no interval", `n ${c.n === null || c.n === undefined ? "?" : c.n}`];
  if (typeof c.coverage === "number") parts.push(`coverage ${(100 * c.coverage).toFixed(0)}%`);
  if (c.capped) parts.push(c.cap_text || "capped by a limit");
  if (typeof c.chance === "number") parts.push(`chance ${(100 * c.chance).toFixed(1)}${c.at_chance ? " (at chance)" : ""}`);
  if (c.low_coverage) parts.push("low coverage");
  if (c.error) parts.push(c.error);
  return parts.join(" · ");
}

async function renderEvalCompare(params) {
  const a = params.get("a") || "", b = params.get("b") || "";
  crumbs(["experiments", "#/"], ["evaluations", evalLinks.board()], ["compare", null]);
  const data = await api(`/api/evals/compare?${q({a, b})}`);
  const rows = Object.entries(data.tasks).map(([task, e]) => el("tr", {"data-task": task},
    el("td", {text: task}), el("td", {text: e.metric}),
    el("td", {class: "num", text: e.a_text}), el("td", {class: "num", text: e.b_text}),
    el("td", {class: "num diff", text: e.text}), el("td", {class: "num", text: e.paired ? e.diff.n : "-"}),
    el("td", {class: "sentence", text: e.sentence}),
    el("td", {}, e.paired && e.diff.disagree ? el("a", {class: "disagree-link",
      href: evalLinks.samples({run: data.a.key, task, show: "disagree", other: data.b.key}),
      text: `${e.diff.disagree} items`}) : el("span", {class: "muted", text: "none"}))));
  setPage(el("h1", {text: "Compare evaluations"}), evalNav(""),
    kv([["A", el("a", {href: links.step(data.a.path), text: `${data.a.label} (${data.a.key})`})],
        ["B", el("a", {href: links.step(data.b.path), text: `${data.b.label} (${data.b.key})`})]]),
    el("p", {id: "verdict", class: "verdict", text: data.verdict}),
    el("table", {id: "compare-table"},
      el("thead", {}, el("tr", {}, ["task", "metric", "A", "B", "B - A (95% interval)", "items", "verdict", "where they disagree"]
        .map(h => el("th", {text: h})))),
      el("tbody", {}, rows)),
    el("p", {class: "muted", text: data.method}),
    notesList(data.notes));
}

async function renderSamples(params) {
  const run = params.get("run") || "", task = params.get("task") || "";
  const show = params.get("show") || "all", other = params.get("other") || "";
  const cursor = params.get("cursor") || "";
  const page = Number(params.get("page") || 1);
  crumbs(["experiments", "#/"], ["evaluations", evalLinks.board()], [`samples: ${task}`, null]);
  const query = {run, task, show};
  if (other) query.other = other;
  if (cursor) query.cursor = cursor;
  const data = await api(`/api/evals/samples?${q(query)}`);
  const filters = ["all", "right", "wrong"].concat(other ? ["disagree"] : []).map(s => s === show
    ? el("strong", {class: "filter", text: s})
    : el("a", {class: "filter", href: evalLinks.samples(Object.assign({run, task, show: s}, other ? {other} : {})), text: s}));
  const items = data.items.map(item => item.bad
    ? el("div", {class: "sample bad", text: `byte ${item.offset}: a line that is not valid JSON or is too long (skipped)`})
    : sampleView(item, data));
  const pager = el("div", {class: "pager"},
    el("span", {id: "page-number", text: `page ${page}`}),
    data.next_cursor !== null ? el("button", {id: "next-page", text: "Next page →", onclick: () => {
      location.hash = evalLinks.samples(Object.assign({}, query, {cursor: data.next_cursor, page: page + 1}));
    }}) : el("span", {class: "muted", text: "end of file"}));
  setPage(el("h1", {text: `${task}: ${data.run.label}`}), evalNav(""),
    el("p", {class: "filters"}, "show: ", filters.flatMap((x, i) => i ? [" · ", x] : [x]),
      data.other ? el("span", {class: "muted", text: ` (beside ${data.other.label})`}) : null),
    el("p", {class: "muted", id: "samples-metric", text: `metric ${data.metric || "none"}: ${pickRule(data.metric)}; `
      + `${data.scanned} lines read for this page`}),
    notesList(data.notes),
    items.length ? el("div", {id: "samples"}, items) : el("p", {class: "muted", id: "samples-none", text: "No item on this page matches."}),
    pager);
}

// How the metric picks a choice: acc_norm by log-likelihood per character, the others by log-likelihood.
function pickRule(metric) {
  return metric && metric.split(",")[0] === "acc_norm"
    ? "the choice with the highest log-likelihood per character (length-normalised) is picked"
    : "the choice with the highest log-likelihood is picked";
}

// The two scores of a choice, the one the metric picks by in bold.
function scoreSpans(item, i) {
  const fmt = (x, digits) => typeof x === "number" ? x.toFixed(digits) : "n/a";
  const raw = el("span", {class: "score-raw" + (item.picked_by === "raw" ? " by-metric" : ""),
    text: `loglikelihood ${fmt(item.loglikelihoods[i], 3)}`});
  const norm = el("span", {class: "score-norm" + (item.picked_by === "norm" ? " by-metric" : ""),
    text: `per character ${fmt((item.normalised || [])[i], 4)}`});
  return el("span", {class: "muted ll"}, " ", raw, " · ", norm);
}

function sampleView(item, data) {
  const mark = item.correct === true ? "right" : item.correct === false ? "wrong" : "";
  const other = item.other || null;
  const here = data.other ? "A" : "";
  const choices = item.choices.length ? el("ol", {class: "choices", start: 0}, item.choices.map((c, i) => el("li", {
    class: (i === item.picked ? "picked " : "") + (i === item.gold ? "gold" : "")},
    el("span", {class: "choice-text", text: c}),
    scoreSpans(item, i),
    i === item.picked ? el("span", {class: "tag pick-here", text: ` ${here ? "A " : ""}picked`}) : null,
    other && i === other.picked ? el("span", {class: "tag pick-other", text: " B picked"}) : null,
    i === item.gold ? el("span", {class: "tag", text: " gold"}) : null))) : null;
  const otherMark = other && other.correct !== null && other.correct !== undefined ? (other.correct ? "right" : "wrong") : "";
  return el("div", {class: `sample ${mark}`, "data-doc": String(item.doc_id)},
    el("div", {class: "head"}, `item ${item.doc_id}`, item.task ? ` · ${item.task}` : "", " ",
      mark ? el("span", {class: `badge ${mark === "right" ? "SUCCESS" : "FAILED"}`, text: mark}) : null,
      data.other ? el("span", {class: "muted pair", text: ` A = ${data.run.label}, B = ${data.other.label}: `
        + `${data.metric} ${item.value} (A), ${other ? other.value : "not scored"} (B)`}) : null,
      otherMark ? el("span", {class: `badge ${otherMark === "right" ? "SUCCESS" : "FAILED"}`, text: `B ${otherMark}`}) : null),
    el("pre", {class: "prompt", text: item.prompt}),
    choices,
    item.generation !== null ? el("div", {}, el("span", {class: "muted", text: "generation: "}), el("pre", {class: "generation", text: item.generation})) : null,
    !item.choices.length ? el("div", {class: "muted", text: `gold: ${typeof item.gold === "string" ? item.gold : JSON.stringify(item.gold)}`}) : null);
}

async function renderTraining(params) {
  crumbs(["experiments", "#/"], ["evaluations", evalLinks.board()], ["during training", null]);
  const tasks = params.get("tasks") || "";
  const data = await api(`/api/evals/training?${q(tasks ? {tasks} : {})}`);
  const header = [el("h1", {text: "Scores during training"}), evalNav("score during training")];
  if (!data.runs.length) {
    setPage(header, el("p", {class: "muted", id: "training-none",
      text: "No training run under this prefix logged evaluation scores (metrics.jsonl eval/{task}/... lines)."}));
    return;
  }
  const keys = [...new Set(data.runs.flatMap(r => Object.keys(r.series)))].sort();
  const sections = keys.map(key => {
    const runs = data.runs.filter(r => r.series[key] && r.series[key].length);
    const steps = [...new Set(runs.flatMap(r => r.series[key].map(p => p[0])))].sort((x, y) => x - y);
    const at = runs.map(r => new Map(r.series[key].map(p => [p[0], p[1]])));
    const lows = runs.map(r => new Map(((r.bounds || {})[key] || {}).low ? r.bounds[key].low.map(p => [p[0], p[1]]) : []));
    const highs = runs.map(r => new Map(((r.bounds || {})[key] || {}).high ? r.bounds[key].high.map(p => [p[0], p[1]]) : []));
    const cellText = (i, s) => !at[i].has(s) ? "" : fmtValue(at[i].get(s))
      + (lows[i].has(s) && highs[i].has(s) ? ` (${fmtValue(lows[i].get(s))}-${fmtValue(highs[i].get(s))})` : "");
    const table = el("table", {class: "training-table", "data-key": key},
      el("thead", {}, el("tr", {}, el("th", {text: "step"}), runs.map(r => el("th", {}, el("a", {href: links.step(r.path), text: r.name}))))),
      el("tbody", {}, steps.map(s => el("tr", {}, el("td", {class: "num", text: s}),
        at.map((m, i) => el("td", {class: "num", text: cellText(i, s)}))))));
    const chart = typeof linePlot === "function"
      ? linePlot(key, runs.map(r => ({label: r.name, key: r.path, points: r.series[key]}))) : null;
    const key_ = chart ? el("div", {class: "series-keys"}, runs.map((r, i) => el("span", {
      class: `series-key series-${i % 10}${i >= 10 ? " dashed" : ""}`, text: r.name}))) : null;
    return el("section", {class: "training-series"}, el("h2", {text: key}), chart, key_, table);
  });
  setPage(header, sections.length && typeof chartControls === "function" ? chartControls() : null, sections, notesList(data.notes));
}

// The evaluation section of an evaluation step's page (format 2 results.json): per task the value
// and interval as the leaderboard shows it, the split and coverage, and links to its samples.
function evalStepSection(path) {
  const box = el("div", {id: "eval-run"}, el("h3", {text: "Evaluation results"}), el("p", {class: "muted", text: "Loading…"}));
  api(`/api/evals/run?${q({path})}`).then(data => {
    const run = data.run;
    const rows = Object.entries(data.tasks).map(([task, t]) => el("tr", {"data-task": task},
      el("td", {}, t.cell && t.cell.status !== "failed" ? el("a", {href: evalLinks.samples({run: run.key, task}), text: task}) : el("span", {text: task})),
      el("td", {class: "num", text: t.cell ? `${t.cell.metric} ${t.cell.text}` : "-"}),
      el("td", {text: Object.entries(t.metrics).map(([m, c]) => `${m} ${c.text}`).join(" · ")}),
      el("td", {text: [t.split, t.default_split && t.default_split !== t.split ? `(default ${t.default_split})` : ""].filter(Boolean).join(" ")}),
      el("td", {class: "num", text: t.num_fewshot === null ? "" : t.num_fewshot}),
      el("td", {class: "num", text: t.scored === null ? "" : `${t.scored} / ${t.attempted}`}),
      el("td", {class: "items", text: t.cell && t.cell.cap_text ? t.cell.cap_text : "every item"}),
      el("td", {class: "num", text: typeof t.chance === "number" ? (100 * t.chance).toFixed(1) : "-"})));
    box.replaceChildren(el("h3", {text: "Evaluation results"}),
      el("p", {}, run.train_path ? el("a", {href: links.step(run.train_path), text: run.label}) : run.label, " · ",
        el("a", {href: evalLinks.board(), text: "all evaluations"})),
      el("table", {id: "eval-tasks"}, el("thead", {}, el("tr", {}, ["task", "shown", "every metric", "split", "n-shot", "scored / attempted", "items", "chance"].map(h => el("th", {text: h})))),
        el("tbody", {}, rows)),
      notesList(run.notes, "eval-run-notes"));
  }).catch(err => box.replaceChildren(el("div", {class: "warn", text: `evaluation: ${err.message || err}`})));
  return box;
}
