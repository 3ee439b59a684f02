"""Oracle: our lm-eval adapter gives lm-eval's own `hf` backend's numbers on real tasks.

A tiny Llama is trained by `train_lm` on a token cache with a real tokenizer; lm-eval's `HFLM`
(torch + transformers, the test extra) scores the step's own `hf/` folder as it was written, with
nothing added, and `MarinLM` (JAX) the step's checkpoint, on the same tasks, the same
offline documents, the same few-shot seed and limit. Request by request, the log-likelihoods agree
within 2e-4 absolute (+1e-5 relative): both run the same float32 model, but XLA and torch order
their matmul and softmax reductions differently, which moves a token's log-probability by ~1e-6
and a continuation's sum of up to ~30 of them by at most ~1e-4; anything wrong in tokenization,
truncation, positions or padding moves them by far more (a token is worth ~|log p| ~ 5). The
per-item choices (acc, acc_norm) and greedy flags are then equal item by item.
"""

import math

import numpy as np
import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from marin_lab.evaluation.harness import MarinLM, TaskSpec, run_task
from marin_lab.evaluation.loading import load_model, load_tokenizer_for
from marin_lab.main.train_lm import train_lm
from marin_lab.testing.training import tiny_model, tiny_train_config
from marin_lab.training.optimizer import OptimizerConfig
from marin_lab.training.token_cache import write_token_cache

pytestmark = pytest.mark.slow

# The first N items of each task (a seeded sample of piqa reaches an item longer than the tiny
# model's 512-token context, which both backends would have to cut).
TASKS = tuple(
    TaskSpec(name, 0, n, "first") for name, n in (("arc_easy", 20), ("piqa", 20), ("copa", 20), ("hellaswag", 8))
)
ATOL, RTOL = 2e-4, 1e-5
TEXT = (
    "Question: which of these is the answer? the cat sat on the mat because it was warm and the "
    "water boiled at a high temperature in the laboratory; plants need sunlight to grow."
)


def _tokenizer() -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        [TEXT] * 30,
        trainers.BpeTrainer(
            vocab_size=400, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    return tok


@pytest.fixture(scope="module")
def models_(tmp_path_factory):
    import torch  # the test extra installs it; a missing torch must fail, not skip
    from lm_eval.models.huggingface import HFLM

    tok = _tokenizer()
    root = tmp_path_factory.mktemp("oracle")
    words = TEXT.split()
    rng = np.random.default_rng(0)
    docs = [tok.encode(" ".join(rng.choice(words, size=40))).ids for _ in range(60)]
    cache = str(root / "cache")
    eos = tok.token_to_id("<|endoftext|>")
    write_token_cache(
        cache,
        {"train": docs[:50], "validation": docs[50:]},
        vocab_size=tok.get_vocab_size(),
        eos_id=eos,
        tokenizer_json=tok.to_str(),
    )
    # A larger init spread than training's makes the choices' log-likelihoods far apart (no ties);
    # two small steps keep it while the weights, the checkpoint and the export are a real run's.
    cfg = tiny_model(vocab_size=tok.get_vocab_size(), max_seq_len=512, initializer_std=0.08)
    out = str(root / "train")
    summary = train_lm(
        tiny_train_config(
            out, {"c": cache}, model=cfg, num_train_steps=2, optimizer=OptimizerConfig(learning_rate=1e-3, warmup=0)
        )
    )
    theirs = HFLM(
        pretrained=summary["hf_path"],  # the step's folder as written: nothing is added to it here
        backend="causal",
        device="cpu",
        dtype=torch.float32,
        batch_size=16,
        logits_cache=False,
    )
    model, params, _, step = load_model(out)
    assert step == 2 and model == cfg
    ours = MarinLM(params, model, load_tokenizer_for(out)[0], batch_size=16)
    return ours, theirs


@pytest.mark.parametrize("spec", TASKS, ids=lambda s: s.name)
def test_our_adapter_gives_the_hf_backends_numbers(models_, spec):
    ours, theirs = models_
    a = run_task(ours, spec, data="offline")
    b = run_task(theirs, spec, data="offline")
    sa, sb = a["samples"][spec.name], b["samples"][spec.name]
    assert len(sa) == len(sb) == spec.limit
    by_doc = {s["doc_id"]: s for s in sb}
    compared = 0
    for s in sa:
        t = by_doc[s["doc_id"]]
        assert s["arguments"] == t["arguments"]  # same requests: prompts and continuations
        ll_a = [r[0][0] for r in s["resps"]]
        ll_b = [r[0][0] for r in t["resps"]]
        np.testing.assert_allclose(ll_a, ll_b, atol=ATOL, rtol=RTOL)
        assert [r[0][1] for r in s["resps"]] == [r[0][1] for r in t["resps"]]  # is_greedy
        for metric in s["metrics"]:
            assert s[metric] == t[metric], (spec.name, s["doc_id"], metric)
        gaps = sorted(ll_a)
        assert all(math.isfinite(x) for x in ll_a)
        compared += len(ll_a)
        assert gaps[-1] - gaps[0] > 10 * ATOL  # the choices are told apart, so equal choices mean something
    assert compared >= 2 * spec.limit
    for key, value in a["results"][spec.name].items():
        if key.endswith(",none") and "stderr" not in key:
            assert value == pytest.approx(b["results"][spec.name][key], abs=1e-9)
