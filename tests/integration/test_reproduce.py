"""`marin-lab reproduce`: a recorded experiment is rebuilt from its stored script and compared."""

from __future__ import annotations

import json
import os
import re
import textwrap
from pathlib import Path

import pytest

from marin_lab.cli import main as cli_main
from marin_lab.execution import Executor, ExecutorMainConfig
from marin_lab.execution.main import capture_steps
from marin_lab.io.fs import read_json, write_json
from marin_lab.reproduce import IDENTICAL, NOT_REPRODUCIBLE, ReproduceError, reproduce
from tests.data_fixtures import make_html_site

# download -> extract -> tokenizer -> tokenize -> train (a few steps) -> evaluate (perplexity and copa), on
# made-up HTML: the quickstart's recipe at a tiny size.
PIPELINE = textwrap.dedent("""
    import os

    from experiments.defaults import (default_download, default_eval, default_extract, default_tokenize,
                                      default_train, default_train_tokenizer)
    from experiments.simple_train_config import SimpleTrainConfig
    from marin_lab.execution import executor_main
    from marin_lab.training import CheckpointConfig, LlamaConfig

    raw = default_download("site", source=os.environ["SITE"], num_workers=NUM_WORKERS)
    docs = default_extract("site", raw, num_shards=2, num_workers=NUM_WORKERS)
    tok = default_train_tokenizer("site", docs, vocab_size=300)
    data = default_tokenize("site", docs, tokenizer=tok, validation_fraction=0.3, num_workers=NUM_WORKERS)
    tiny = LlamaConfig(vocab_size=None, hidden_dim=16, intermediate_dim=32, num_layers=1, num_heads=2,
                       num_kv_heads=1, max_seq_len=128)  # room for copa's answers in a 300-token vocabulary
    model = default_train("tiny", data, tiny, SimpleTrainConfig(
        resources={"num_cpus": 1}, train_batch_size=2, num_train_steps=4, train_seq_len=32, learning_rate=1e-2,
        compute_dtype="float32", checkpoint=CheckpointConfig(save_every_steps=2, keep_last=1), steps_per_eval=2,
        max_eval_batches=1))
    # An lm-eval task as the quickstart's: its config holds functions (fewshot_config.doc_to_target).
    evaluation = default_eval("tiny", model, data, tasks=("copa:0:4",), data="offline", seq_len=32, max_sequences=4)

    if __name__ == "__main__":
        executor_main(steps=[evaluation])
""")


def _script(folder, text: str, num_workers: int = 1) -> str:
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "experiment.py")
    with open(path, "w") as f:
        f.write(text.replace("NUM_WORKERS", str(num_workers)))
    return path


def _record(script: str, prefix: str, run_only=None) -> str:
    steps, _ = capture_steps(script)
    return (
        Executor(ExecutorMainConfig(prefix=prefix, backend="local"), script=script)
        .run(steps, run_only=run_only)
        .experiment_path
    )


def _tree(root) -> dict[str, int]:
    """Every file under `root` with its mtime, but W&B's folders: wandb-core, a service process that
    outlives the original run, may still append to that run's debug-core.log."""
    return {
        os.path.join(d, f): os.stat(os.path.join(d, f)).st_mtime_ns
        for d, _, fs in os.walk(root)
        for f in fs
        if "/wandb/" not in os.path.join(d, f)
    }


@pytest.fixture()
def site(tmp_path, monkeypatch):
    make_html_site(tmp_path / "site", n=24)
    monkeypatch.setenv("SITE", str(tmp_path / "site"))


@pytest.mark.slow
def test_pipeline_reproduces_deep_and_nothing_is_written_into_the_original(tmp_path, site, capsys):
    original = str(tmp_path / "original")
    experiment = _record(_script(tmp_path / "a", PIPELINE), original)
    before = _tree(original)
    assert cli_main(["reproduce", experiment, "--into", str(tmp_path / "scratch"), "--deep"]) == 0
    table = capsys.readouterr().out
    rows = {
        line.split()[0].split("/")[0]: line for line in table.splitlines() if re.match(r"  \w+/\S+-[0-9a-f]{8} ", line)
    }
    assert sorted(rows) == ["checkpoints", "documents", "evaluation", "raw", "tokenized", "tokenizers"], table
    assert all(line.split()[1] == "identical" for line in rows.values()), table
    assert "6 steps: 6 identical" in table
    # Regression: results.json held lm-eval's few-shot functions as reprs with memory addresses.
    steps = json.loads(Path(experiment).read_text())["steps"]
    evaluation = next(s["output_path"] for s in steps if s["name"].startswith("evaluation/"))
    results = json.loads(Path(evaluation, "results.json").read_text())
    assert results["marin_lab"]["tasks"]["copa"]["status"] == "ok" and "fewshot_config" in results["configs"]["copa"]
    # The W&B folder is a run log: listed apart, not compared; the checkpoint and HF export are compared.
    assert re.search(r"identical +\d+ .*wandb/\* \(\d+\)", rows["checkpoints"]), table
    assert _tree(original) == before  # nothing written (or touched) under the original prefix


@pytest.mark.slow
def test_data_steps_reproduce_on_recorded_inputs_with_another_num_workers(tmp_path, site):
    original = str(tmp_path / "original")
    data_steps = ["^(raw|documents|tokenizers|tokenized)/"]
    _record(_script(tmp_path / "a", PIPELINE, num_workers=1), original, run_only=data_steps)
    # With 2 workers it is the same experiment (num_workers is a knob): the record now has that script ...
    experiment = _record(_script(tmp_path / "b", PIPELINE, num_workers=2), original, run_only=data_steps)
    # ... and tokenize (two shards) run again by 2 worker processes, on the recorded inputs, gives the
    # recorded bytes. One step only: each run starts a process pool, which is slow on a loaded machine.
    report = reproduce(experiment, into=str(tmp_path / "scratch"), steps="^tokenized/")
    assert [(s.name, s.verdict) for s in report.steps] == [("tokenized/site", IDENTICAL)], report.table()
    assert report.ok


NOISY = textwrap.dedent("""
    from marin_lab.execution import ExecutorStep, executor_main, output_path_of, this_output_path, versioned
    from tests.executor_steps import WriteConfig, write_noise, write_text

    a = ExecutorStep("raw/a", write_text, WriteConfig(this_output_path(), versioned("a")))
    b = ExecutorStep("noisy/b", write_noise, WriteConfig(this_output_path(), versioned("b"), (output_path_of(a),)))
    executor_main(steps=[b])
""")


def test_a_difference_is_named_and_exits_1(tmp_path, capsys):
    original = str(tmp_path / "original")
    experiment = _record(_script(tmp_path / "a", NOISY), original)
    b_output = json.loads(Path(experiment).read_text())["steps"][1]["output_path"]
    before = _tree(original)
    # A step's output path leads to its experiment; dependencies are read from the original prefix.
    assert cli_main(["reproduce", b_output, "--into", str(tmp_path / "scratch")]) == 1
    out = capsys.readouterr().out
    assert "DIFFERS" in out and "checksum differs: noise.bin" in out and "differs: data.txt" not in out
    assert _tree(original) == before  # reading dependencies there wrote nothing (no status, no lease)


EMBEDDING = textwrap.dedent("""
    from marin_lab.execution import ExecutorStep, executor_main, output_path_of, this_output_path, versioned
    from tests.executor_steps import WriteConfig, write_locations

    a = ExecutorStep("raw/a", write_locations, WriteConfig(this_output_path(), versioned("a")))
    b = ExecutorStep("proc/b", write_locations, WriteConfig(this_output_path(), versioned("b"), (output_path_of(a),)))
    executor_main(steps=[b])
""")


def test_deep_reproduction_of_a_record_named_through_a_symlinked_prefix_is_identical(tmp_path):
    # Regression: the artifacts embed the prefix the original ran under; named through a symlink,
    # the comparison used to read only the symlink's spelling as {prefix} and found them DIFFERS.
    original = tmp_path / "original"
    experiment = _record(_script(tmp_path / "a", EMBEDDING), str(original))
    os.symlink(original, tmp_path / "link")
    via_link = experiment.replace(str(original), str(tmp_path / "link"), 1)
    report = reproduce(via_link, into=str(tmp_path / "scratch"), deep=True)
    assert [s.verdict for s in report.steps] == [IDENTICAL, IDENTICAL], report.table()
    assert report.original_prefix == str(original)


def test_a_declared_moving_source_is_reported_not_reproducible(tmp_path):
    original = str(tmp_path / "original")
    experiment = _record(_script(tmp_path / "a", NOISY), original)
    record = json.loads(Path(experiment).read_text())
    info_file = os.path.join(record["steps"][1]["output_path"], ".executor_info")
    info = read_json(info_file)
    info["reproducibility"]["not_reproducible"] = "fetches https://example.org/latest without a revision"
    write_json(info_file, info)
    report = reproduce(experiment, into=str(tmp_path / "scratch"))
    assert [s.verdict for s in report.steps] == [IDENTICAL, NOT_REPRODUCIBLE] and report.ok
    assert "example.org/latest" in report.table()


def test_bad_targets_say_what_is_missing(tmp_path, monkeypatch):
    original = str(tmp_path / "original")
    experiment = _record(_script(tmp_path / "a", NOISY), original)
    with pytest.raises(ReproduceError, match="reaches the original prefix"):
        reproduce(experiment, into=os.path.join(original, "scratch"))
    old = read_json(experiment)
    del old["code"]
    write_json(str(tmp_path / "old.json"), old)
    with pytest.raises(ReproduceError, match="no stored script .*older record schema"):
        reproduce(str(tmp_path / "old.json"))
    write_json(str(tmp_path / "other.json"), {"some": "json"})
    with pytest.raises(ReproduceError, match="not an experiment record"):
        reproduce(str(tmp_path / "other.json"))


def test_a_recorded_script_that_no_longer_imports_names_the_error(tmp_path, monkeypatch):
    helpers = tmp_path / "helpers"
    helpers.mkdir()
    (helpers / "gone_helper.py").write_text("TEXT = 'a'\n")
    monkeypatch.syspath_prepend(str(helpers))
    script = _script(tmp_path / "a", "import gone_helper\n" + NOISY)
    experiment = _record(script, str(tmp_path / "original"))
    monkeypatch.syspath_prepend(str(tmp_path / "elsewhere"))
    (helpers / "gone_helper.py").unlink()
    import sys

    sys.modules.pop("gone_helper", None)
    with pytest.raises(ReproduceError, match="no longer runs here: ModuleNotFoundError: No module named 'gone_helper'"):
        reproduce(experiment, into=str(tmp_path / "scratch"))
