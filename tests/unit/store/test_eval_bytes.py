"""results.json and samples files hold no process-dependent bytes: the same evaluation written by two
processes is the same bytes (lm-eval's task configs hold functions, once written as reprs with addresses)."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from marin_lab.io import fs as mfs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

# copa through lm-eval with a stand-in model whose scores depend on the text alone: the
# evaluation step's own task loop and writer, without training or loading a model.
EVALUATE = textwrap.dedent("""
    import sys

    from lm_eval.api.model import LM

    from marin_lab.evaluation.evaluate_lm import evaluate_tasks, parse_task
    from marin_lab.store.eval_results import write_results


    class TextLengthLM(LM):
        def loglikelihood(self, requests):
            return [(-float(len(r.args[1])), False) for r in requests]

        def loglikelihood_rolling(self, requests):
            return [-float(len(r.args[0])) for r in requests]

        def generate_until(self, requests):
            return ["" for _ in requests]


    out = sys.argv[1]
    merged = evaluate_tasks(TextLengthLM(), [parse_task("copa:0:3")], out, data="offline")
    write_results(out, {**merged, "marin_lab": {"tasks": merged.pop("tasks")}})
""")


@pytest.mark.slow
def test_two_processes_write_the_same_evaluation_bytes(tmp_path):
    outs = []
    for seed in ("1", "2"):  # string hashing, and with it set order, differs between the two
        out = tmp_path / f"eval-{seed}"
        env = {**os.environ, "PYTHONHASHSEED": seed, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
        subprocess.run([sys.executable, "-c", EVALUATE, str(out)], cwd=ROOT, env=env, check=True, timeout=300)
        outs.append(out)
    a, b = outs
    text = (a / "results.json").read_text()
    assert text == (b / "results.json").read_text()
    assert (a / "samples_copa.jsonl").read_bytes() == (b / "samples_copa.jsonl").read_bytes()
    assert " at 0x" not in text
    # The few-shot config's functions are named (module and qualified name), not dropped.
    fewshot = json.loads(text)["configs"]["copa"]["fewshot_config"]
    assert any(isinstance(v, str) and v.endswith("doc_to_target") for v in fewshot.values()), fewshot


def _named():
    pass


class _Opaque:
    pass


def test_json_default_writes_no_process_dependent_bytes(tmp_path):
    value = {
        "fn": _named,
        "lambda": lambda x: x,
        "object": _Opaque(),
        "set": {"pear", "apple", "fig"},
        "number": np.int64(3),
    }
    mfs.write_json(str(tmp_path / "a.json"), value)
    written = json.loads((tmp_path / "a.json").read_text())
    assert written == {
        "fn": f"{__name__}._named",
        "lambda": f"{__name__}.test_json_default_writes_no_process_dependent_bytes.<locals>.<lambda>",
        "object": f"<{__name__}._Opaque object>",
        "set": ["apple", "fig", "pear"],
        "number": 3,
    }
