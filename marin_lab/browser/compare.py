"""The runs of one experiment that can be compared: its steps with a `metrics.jsonl`, each labelled.

The compare page (`#/compare/<experiment>`) overlays one metric of the chosen runs on one chart;
this module answers which runs there are and what to call them. A label names what sets runs apart
in a training config (compute dtype, the precision policy's non-default fields, the seed), read
from each step's record; a record that is missing or corrupt just gives no label.
"""

from __future__ import annotations

from typing import Any

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


def training_runs(browser: Browser, exp_id: str) -> dict[str, Any]:
    """The experiment's steps that logged metrics, in the experiment's order, with labels."""
    exp = browser.experiment(exp_id)
    steps = [s for s in exp.get("steps", []) if s.get("output_path")]
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
            }
        )
    return {
        "id": exp["id"],
        "name": exp.get("name") or exp["id"],
        "state": exp.get("state"),
        "error": exp.get("error"),
        "runs": runs,
        "more": len(found) - len(shown),
    }


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
