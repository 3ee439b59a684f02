"""The compare view's server side: one metric read alone, the keys offered, run labels."""

from __future__ import annotations

import json

from marin_lab.browser.compare import config_label, short_identity
from marin_lab.browser.metrics import read_metrics
from marin_lab.browser.paths import Roots


def test_one_metric_is_read_alone_and_every_numeric_key_is_offered(tmp_path):
    rows = [
        {
            "step": s,
            "loss": 3.0 - s / 10,
            "eval/valid/loss": 4.0,
            "HF_TOKEN": 7,
            "note": "x",
            "flag": True,
            "fp8/saturated": 0.0,
        }
        for s in range(5)
    ]
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n{broken\n")
    roots = Roots.of([str(tmp_path)])
    out = read_metrics(roots, str(tmp_path), "eval/valid/loss")
    assert out["series"] == {"eval/valid/loss": [[s, 4.0] for s in range(5)]}  # no loss, no fp8/ series
    assert out["keys"] == ["eval/valid/loss", "fp8/saturated", "loss"]  # not step, strings, booleans, secrets
    assert out["bad_lines"] == 1 and out["rows"] == 5
    # Without one: the default series, float8 statistics and every validation loss (charted beside loss).
    assert set(read_metrics(roots, str(tmp_path))["series"]) == {"loss", "fp8/saturated", "eval/valid/loss"}


def test_a_label_names_dtype_non_default_precision_and_seed():
    trainer = {
        "compute_dtype": "bfloat16",
        "param_dtype": "float32",
        "seed": 2,
        "precision": {"matmul": "fp8_delayed", "optimizer_state": "float32", "fp8_lm_head": True},
    }
    assert config_label(trainer) == "compute bfloat16 · matmul fp8_delayed · fp8 lm head · seed 2"
    assert config_label({"train": trainer, "name": "x"}) == config_label(trainer)  # one level down
    assert config_label({"input_path": "a"}) is None
    assert short_identity("checkpoints/fp8-nano-fp8-seed0-587f3044") == "587f3044"


def test_validation_losses_are_read_by_default_and_capped(tmp_path, monkeypatch):
    import marin_lab.browser.metrics as bm

    sets = [f"set{i}" for i in range(5)]
    rows = [{"step": s, "loss": 2.0} | {f"eval/{n}/loss": 3.0 for n in sets} | {"eval/set0/bpb": 1.0} for s in (1, 2)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    roots = Roots.of([str(tmp_path)])
    series = read_metrics(roots, str(tmp_path))["series"]
    assert {k for k in series if k.startswith("eval/")} == {f"eval/{n}/loss" for n in sets}  # not bpb
    monkeypatch.setattr(bm, "MAX_VALIDATION_SERIES", 2)
    assert [k for k in read_metrics(roots, str(tmp_path))["series"] if k.startswith("eval/")] == [
        "eval/set0/loss",
        "eval/set1/loss",
    ]
