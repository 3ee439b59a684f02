// marin_lab browser: what an experiment's steps cost, and what its latest run saved by reuse.
// The text of each number comes from the server (execution/cost.py), the same words and rounding
// `marin-lab status --cost` prints. Uses app.js's helpers (el, api, table): classic scripts, one scope.
"use strict";

async function fillCost(expId) {
  const box = document.getElementById("cost");
  if (!box) return;
  let data;
  try {
    data = await api(`/api/experiments/${encodeURIComponent(expId)}/cost`);
  } catch (err) {
    box.replaceChildren(el("p", {class: "warn", text: `cost not available: ${err.message || err}`}));
    return;
  }
  if (data.state !== "ok") {
    box.replaceChildren(el("p", {class: "muted", text: `cost not available: the experiment file is ${data.state}`}));
    return;
  }
  const rows = data.steps.map(s => [s.identity, s.accelerator ? `${s.accelerator} ×${s.chips ?? "?"}` : "",
    s.recorded && s.attempts ? String(s.attempts) : "", s.text, s.goodput_text || ""]);
  box.replaceChildren(el("h2", {text: "Cost"}),
    el("p", {id: "cost-total", text: data.text}),
    el("p", {id: "cost-goodput", text: data.goodput_text || "goodput: no step has a record of it yet"}),
    el("p", {class: "muted", id: "cost-prices", text: data.prices}),
    table(["Step", "Accelerator", "Attempts", "Cost", "Goodput"], rows, {id: "cost-table"}));
  document.body.dataset.costReady = "1";
}
