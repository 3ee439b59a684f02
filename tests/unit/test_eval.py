"""evaluate_lm: perplexity and bits-per-byte, multiple-choice scoring, results.json."""

import json
import math

import jax
import numpy as np
import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from marin_lab.evaluation import EvalLmConfig, EvaluationError, evaluate_lm, load_task, shipped_tasks
from marin_lab.evaluation.multiple_choice import encode_pair, evaluate_task
from marin_lab.evaluation.scoring import token_logprobs
from marin_lab.models.llama import forward, init_params
from marin_lab.training import train_lm, write_token_cache
from marin_lab.training.optimizer import OptimizerConfig
from marin_lab.training.testing import tiny_model, tiny_train_config

SENTENCES = [f"the {a} sat on the {b}." for a, b in
             [("cat", "mat"), ("dog", "log"), ("cow", "field"), ("bird", "branch")]]


def _tokenizer() -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=290, special_tokens=["<eos>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(SENTENCES * 20, trainer)
    return tok


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("eval")
    tok = _tokenizer()
    rng = np.random.default_rng(0)
    docs = [" ".join(rng.choice(SENTENCES, size=6)) for _ in range(120)]
    encode = lambda texts: [tok.encode(t).ids for t in texts]  # noqa: E731
    cache = str(root / "cache")
    write_token_cache(cache, {"train": encode(docs[:100]), "validation": encode(docs[100:])},
                      vocab_size=tok.get_vocab_size(), eos_id=tok.token_to_id("<eos>"),
                      tokenizer_json=tok.to_str())
    cfg = tiny_train_config(str(root / "train"), {"web": cache}, num_train_steps=40,
                            model=tiny_model(vocab_size=tok.get_vocab_size()),
                            optimizer=OptimizerConfig(learning_rate=1e-2, warmup=4))
    train_lm(cfg)
    return root, cache, tok, cfg


def test_shipped_tasks_load():
    assert {"arithmetic_2digit", "capitals"} <= set(shipped_tasks())
    name, examples = load_task("capitals")
    assert name == "capitals" and len(examples) == 40
    assert examples[0]["choices"][examples[0]["label"]] == " Paris"


def test_evaluate_writes_results_and_learns_the_pattern(trained, tmp_path):
    root, cache, tok, _ = trained
    task = tmp_path / "sat_on.jsonl"
    lines = [{"id": str(i), "context": f"the {a} sat on the", "choices": [f" {b}", f" {wrong}"],
              "label": 0}
             for i, (a, b, wrong) in enumerate([("cat", "mat", "zebra"), ("dog", "log", "quantum"),
                                                ("cow", "field", "violin"), ("bird", "branch", "jazz")])]
    task.write_text("".join(json.dumps(x) + "\n" for x in lines))
    out = tmp_path / "eval"
    results = evaluate_lm(EvalLmConfig(checkpoint_path=str(root / "train"), output_path=str(out),
                                       caches={"web": cache}, seq_len=32, max_sequences=16,
                                       tasks=("capitals", str(task))))
    assert json.loads((out / "results.json").read_text()) == json.loads(json.dumps(results))
    assert results["step"] == 40
    # A model that learned four sentences is far better than uniform over ~290 tokens.
    assert 1.0 < results["perplexity"]["web"] < 20
    details = results["details"]["web"]
    assert results["bits_per_byte"]["web"] == pytest.approx(
        details["loss"] * details["tokens"] / math.log(2) / details["bytes"])
    # Seen continuations beat words the model never saw after "sat on the".
    assert results["tasks"]["sat_on"] == {"accuracy": 1.0, "accuracy_norm": 1.0, "n": 4}
    assert results["tasks"]["capitals"]["n"] == 40


def test_choice_loglik_matches_a_direct_forward_pass():
    cfg = tiny_model(vocab_size=300)
    params = init_params(cfg, jax.random.key(0))
    tok = _tokenizer()
    ctx, cont = encode_pair(tok, "the cat sat on the", " mat")
    ids = np.array([ctx + cont])
    logits = np.asarray(forward(params, ids[:, :-1], cfg), np.float64)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = sum(logp[0, len(ctx) - 1 + j, cont[j]] for j in range(len(cont)))
    ours = token_logprobs(params, cfg, ids, batch_size=2)[0, len(ctx) - 1:].sum()
    assert ours == pytest.approx(expected, abs=1e-4)
    r = evaluate_task(params, cfg, tok, [{"context": "the cat sat on the", "choices": [" mat", " x"],
                                          "label": 0}], max_len=32)
    assert r["n"] == 1 and r["accuracy"] in (0.0, 1.0)


def test_missing_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(EvaluationError, match="checkpoint_path"):
        evaluate_lm(EvalLmConfig(checkpoint_path=str(tmp_path / "none"), output_path=str(tmp_path)))


def test_unknown_task_lists_the_shipped_ones(trained, tmp_path):
    root, cache, _, _ = trained
    with pytest.raises(EvaluationError, match="capitals"):
        evaluate_lm(EvalLmConfig(checkpoint_path=str(root / "train"), output_path=str(tmp_path),
                                 tasks=("no_such_task",), seq_len=32,
                                 tokenizer_path=f"{cache}/tokenizer.json"))
