"""experiments/finetune_quickstart.py's closing report covers the fine-tunes this run finished: with
`--run_only qlora` the full and LoRA runs did not run, and the report must not read their outputs."""

from __future__ import annotations

import json
from types import SimpleNamespace

from experiments import finetune_quickstart as fq


def test_the_report_leaves_out_fine_tunes_this_run_did_not_finish(tmp_path, capsys):
    steps, outcomes = [], {}
    for mode in ("full", "lora", "qlora"):
        for step in (fq.runs[mode], fq.evals[mode]):
            out = tmp_path / step.name
            steps.append(SimpleNamespace(name=step.name, identity=step.name, output_path=str(out)))
            if mode == "qlora":  # the only one this run (--run_only qlora) finished
                out.mkdir(parents=True)
                outcomes[step.name] = SimpleNamespace(status="SUCCESS")
    qlora_run, qlora_eval = tmp_path / fq.runs["qlora"].name, tmp_path / fq.evals["qlora"].name
    (qlora_run / "finetune_summary.json").write_text(
        json.dumps(
            {
                "eval_loss_before": {"manual-sections": 2.0},
                "eval_loss_after": {"manual-sections": 1.0},
                "trainable_params": 10,
                "bytes": 40,
            }
        )
    )
    (qlora_eval / "results.json").write_text(json.dumps({"perplexity": {"quickstart": 12.5}}))
    fq._report(SimpleNamespace(plan=SimpleNamespace(steps=steps), outcomes=outcomes))
    printed = capsys.readouterr().out
    assert "qlora  2.000 -> 1.000  (cut 50%" in printed
    assert "  full " not in printed and "  lora " not in printed and "QLoRA vs LoRA" not in printed
