"""The runs that can be compared: steps with a `metrics.jsonl`, each labelled; and two experiments' diff.

The compare page (`#/compare/<experiment>?with=<other>`) overlays one metric of the chosen runs on
one chart, from one experiment or across several (two learning rates in two experiment files);
this module answers which runs there are and what to call them. A label names what sets runs apart
in a training config (compute dtype, the precision policy's non-default fields, the seed), read
from each step's record; a record that is missing or corrupt just gives no label. The
compare-experiments page (`#/diff?a=A&b=B`) gets what differs between two experiment records,
step by step (`experiment_diff.diff_records`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from marin_lab.browser.experiment_diff import diff_records
from marin_lab.browser.records import Browser
from marin_lab.browser.storage import child, exists, load_json, parallel_map
from marin_lab.io.secrets import redact
from marin_lab.store.layout import INFO_FILE, METRICS_FILE

MAX_RUNS = 200
"""At most this many runs are listed (the first ones in the experiment's order); the rest are counted."""
_PRECISION_DEFAULTS = {
    "matmul": "compute",
    "optimizer_state": "float32",
    "fp8_lm_head": False,
    "rescale_logits_grad": False,
}
"""Fields of marin_lab.precision.PrecisionConfig shown in a label when they differ from these."""
_PRECISION_NAMES = {
    "matmul": "matmul",
    "optimizer_state": "adam state",
    "fp8_lm_head": "fp8 lm head",
    "rescale_logits_grad": "rescaled logits grad",
}


def training_runs(browser: Browser, exp_id: str, others: Sequence[str] = ()) -> dict[str, Any]:
    """The steps of the experiment (then of each of `others`) that logged metrics, in each
    experiment's order, with labels; a step two experiments share is listed once, under the first."""
    exp = browser.experiment(exp_id)
    extra = [browser.experiment(o) for o in dict.fromkeys(others) if o != exp_id]
    seen: set[str] = set()
    steps = []
    for e in (exp, *extra):
        for s in e.get("steps", []):
            if s.get("output_path") and s["key"] not in seen:
                seen.add(s["key"])
                steps.append({**s, "experiment": e["id"]})
    has_metrics = parallel_map(
        lambda s: exists(browser.roots, child(s["output_path"], METRICS_FILE)), steps, local=browser.local
    )
    found = [s for s, has in zip(steps, has_metrics, strict=True) if has]
    shown = found[:MAX_RUNS]
    records = parallel_map(
        lambda s: load_json(browser.roots, child(s["output_path"], INFO_FILE)), shown, local=browser.local
    )
    runs = []
    for step, record in zip(shown, records, strict=True):
        config = record.value.get("config") if record.state == "ok" else None
        runs.append(
            {
                "key": step["key"],
                "name": step["name"],
                "identity": step.get("identity"),
                "short": short_identity(step.get("identity") or step["key"]),
                "output_path": step["output_path"],
                "status": step["status"],
                "label": config_label(redact(config)) if isinstance(config, dict) else None,
                "experiment": step["experiment"],
            }
        )
    return {
        "id": exp["id"],
        "name": exp.get("name") or exp["id"],
        "state": exp.get("state"),
        "error": exp.get("error"),
        "experiments": [
            {"id": e["id"], "name": e.get("name") or e["id"], "state": e.get("state"), "error": e.get("error")}
            for e in (exp, *extra)
        ],
        "runs": runs,
        "more": len(found) - len(shown),
    }


def experiments_diff(browser: Browser, a_id: str, b_id: str) -> dict[str, Any]:
    """What experiment `b_id` differs by from `a_id`, step by step, with each one's header; a
    damaged record is named in its header (`state`, `error`) and the steps are not compared."""
    loaded = {k: browser.experiment_record(k) for k in (a_id, b_id)}
    headers = {}
    for key, item in loaded.items():
        record: dict[str, Any] = item.value if item.state == "ok" else {}
        git = _dict(record.get("git"))
        headers[key] = {
            "id": key,
            "file": item.url,
            "state": item.state,
            "error": item.error,
            **{f: _text(record.get(f)) for f in ("name", "script", "created", "hash")},
            "commit": _text(git.get("commit")),
            "steps": len(_list(record.get("steps"))),
        }
    a, b = loaded[a_id], loaded[b_id]
    both = a.state == "ok" and b.state == "ok"
    diff = diff_records(a.value, b.value) if both else {"steps": [], "counts": {}, "summary": []}
    paths = {**_output_paths(browser, a.value), **_output_paths(browser, b.value)} if both else {}
    for row in diff["steps"]:
        row["a_output_path"], row["b_output_path"] = paths.get(row["a"] or ""), paths.get(row["b"] or "")
    same_script = both and headers[a_id]["script"] is not None and headers[a_id]["script"] == headers[b_id]["script"]
    return {"a": headers[a_id], "b": headers[b_id], "same_script": same_script, **diff}


def _output_paths(browser: Browser, record: dict[str, Any]) -> dict[str, str]:
    """identity -> the step's folder (confined to the roots) for the steps of a record."""
    out = {}
    for step in _list(record.get("steps")):
        if isinstance(step, dict) and isinstance(step.get("identity"), str):
            path = browser.step_dir(step)
            if path is not None:
                out[step["identity"]] = path
    return out


def short_identity(identity: str) -> str:
    """The hash at the end of a step identity (`checkpoints/run-3f2a1b0c` -> `3f2a1b0c`)."""
    tail = identity.rstrip("/").rsplit("/", 1)[-1]
    return tail.rsplit("-", 1)[-1] if "-" in tail else tail


def config_label(config: dict[str, Any]) -> str | None:
    """'compute bfloat16 · matmul fp8 · adam state float16_scaled · seed 1' from a training config.

    Looks at the config itself and one level of nesting (recipes wrap the trainer's config).
    """
    for candidate in (config, *(v for v in config.values() if isinstance(v, dict))):
        if "compute_dtype" in candidate or isinstance(candidate.get("precision"), dict):
            return _label(candidate)
    return None


def _label(config: dict[str, Any]) -> str | None:
    parts = []
    if isinstance(config.get("compute_dtype"), str):
        parts.append(f"compute {config['compute_dtype']}")
    if isinstance(config.get("param_dtype"), str) and config["param_dtype"] != "float32":
        parts.append(f"params {config['param_dtype']}")
    precision = config.get("precision")
    if isinstance(precision, dict):
        for field, default in _PRECISION_DEFAULTS.items():
            value = precision.get(field, default)
            if value != default:
                name = _PRECISION_NAMES[field]
                parts.append(name if value is True else f"{name} {value}")
    if isinstance(config.get("seed"), int) and not isinstance(config["seed"], bool):
        parts.append(f"seed {config['seed']}")
    return " · ".join(parts) or None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
