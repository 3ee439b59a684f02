"""KV-cache generation: equals the full forward pass step by step; sampling, stops, truncation."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from marin_lab.models.generate import SamplingConfig, generate, generate_text, generate_tokens
from marin_lab.models.llama import LlamaConfig, forward, init_params

CONFIG = LlamaConfig(
    vocab_size=97, hidden_dim=32, intermediate_dim=64, num_layers=2, num_heads=4, num_kv_heads=2, max_seq_len=64
)
PROMPTS = [[5, 17, 3], [40, 2, 2, 9, 11, 60, 7, 1, 33], [8], [12, 13, 14, 15, 16]]


@pytest.fixture(scope="module")
def params():
    # A larger init spread than training's so the argmax is far from ties.
    return init_params(dataclasses.replace(CONFIG, initializer_std=0.3), jax.random.key(1))


def _reference_greedy(params, config, prompt, n):
    """argmax of `forward` over the whole sequence so far, one token at a time (the sequence is
    right-padded to the context so one program serves every length: attention is causal)."""
    seq = list(prompt)
    fwd = jax.jit(lambda p, t: forward(p, t, config))
    for _ in range(n):
        padded = np.zeros((1, config.max_seq_len), np.int32)
        padded[0, : len(seq)] = seq
        logits = fwd(params, jnp.asarray(padded))
        seq.append(int(jnp.argmax(logits[0, len(seq) - 1])))
    return seq[len(prompt) :]


@pytest.mark.slow
@pytest.mark.parametrize("tie", [False, True])
def test_greedy_with_cache_equals_argmax_of_the_full_forward(tie):
    config = dataclasses.replace(CONFIG, tie_embeddings=tie)
    params = init_params(dataclasses.replace(config, initializer_std=0.3), jax.random.key(2))
    sampling = SamplingConfig(max_new_tokens=12)
    # Batch of 3 with 4 prompts of different lengths: two batches, the last padded with a filler row.
    got = generate_tokens(params, config, PROMPTS, sampling, batch_size=3)
    want = [_reference_greedy(params, config, p, 12) for p in PROMPTS]
    assert got == want
    assert len({tuple(t) for t in got}) > 1  # not a degenerate model that repeats one answer


@pytest.mark.slow
def test_batching_does_not_change_the_tokens(params):
    sampling = SamplingConfig(max_new_tokens=8, temperature=0.9, top_p=0.8, seed=3)
    one_batch = generate_tokens(params, CONFIG, PROMPTS, sampling, batch_size=8)
    one_each = generate_tokens(params, CONFIG, PROMPTS, sampling, batch_size=1)
    assert one_batch == one_each


@pytest.mark.slow
def test_sampling_is_reproducible_for_a_seed_and_differs_across_seeds(params):
    def run(seed):
        return generate_tokens(params, CONFIG, PROMPTS, SamplingConfig(max_new_tokens=16, temperature=1.5, seed=seed))

    a, b, c = run(0), run(0), run(1)
    assert a == b
    assert a != c
    greedy = generate_tokens(params, CONFIG, PROMPTS, SamplingConfig(max_new_tokens=16))
    assert a != greedy


@pytest.mark.slow
def test_top_p_small_is_greedy(params):
    # A nucleus of the single most likely token is the argmax, whatever the seed and temperature.
    nucleus = generate_tokens(
        params, CONFIG, PROMPTS, SamplingConfig(max_new_tokens=10, temperature=2.0, top_p=1e-6, seed=9)
    )
    assert nucleus == generate_tokens(params, CONFIG, PROMPTS, SamplingConfig(max_new_tokens=10))


@pytest.mark.slow
def test_stop_token_and_max_tokens(params):
    free = generate_tokens(params, CONFIG, PROMPTS, SamplingConfig(max_new_tokens=10))
    assert all(len(t) == 10 for t in free)
    stop_id = free[1][4]
    first = free[1].index(stop_id)
    result = generate(params, CONFIG, PROMPTS, SamplingConfig(max_new_tokens=10, stop_token_ids=(stop_id,)))
    assert result.tokens[1] == free[1][:first]
    assert result.finish_reasons[1] == "stop_token"
    for toks, full, reason in zip(result.tokens, free, result.finish_reasons, strict=True):
        # Every row is its free run cut before the stop token's first appearance (or whole).
        cut = full.index(stop_id) if stop_id in full else len(full)
        assert toks == full[:cut]
        assert reason == ("stop_token" if stop_id in full else "length")
    short = generate_tokens(params, CONFIG, PROMPTS, SamplingConfig(max_new_tokens=3))
    assert short == [t[:3] for t in free]


@pytest.mark.slow
def test_prompts_longer_than_the_context_are_cut_from_the_left_and_counted(params):
    long_prompt = [int(x) for x in np.random.default_rng(0).integers(0, 97, size=100)]
    sampling = SamplingConfig(max_new_tokens=14)
    result = generate(params, CONFIG, [long_prompt, PROMPTS[0]], sampling)
    assert result.truncated == [100 - (64 - 14), 0]
    assert result.num_truncated == 1
    assert result.tokens[0] == _reference_greedy(params, CONFIG, long_prompt[-50:], 14)


def test_bad_requests_are_refused(params):
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        generate_tokens(params, CONFIG, [[1], []], SamplingConfig(max_new_tokens=2))
    with pytest.raises(ValueError, match="outside the model's vocabulary"):
        generate_tokens(params, CONFIG, [[1, 500]], SamplingConfig(max_new_tokens=2))
    with pytest.raises(ValueError, match="top_p"):
        generate_tokens(params, CONFIG, [[1]], SamplingConfig(top_p=0.0))
    with pytest.raises(ValueError, match="max_new_tokens=64"):
        generate_tokens(params, CONFIG, [[1]], SamplingConfig(max_new_tokens=64))


class _CharTokenizer:
    """One token per character 'a'..: enough of tokenizers.Tokenizer for generate_text."""

    class _Encoding:
        def __init__(self, ids):
            self.ids = ids

    def encode(self, text):
        return self._Encoding([ord(c) - 32 for c in text])

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(i + 32) for i in ids)


@pytest.mark.slow
def test_stop_strings_cut_the_text_and_end_the_row(params):
    tok = _CharTokenizer()
    prompts = ["abc", "hello world"]
    free = generate_text(params, CONFIG, tok, prompts, SamplingConfig(max_new_tokens=20))
    assert all(len(t) == 20 for t in free)
    stop = free[0][5:7]  # two characters the first continuation holds
    result = generate(params, CONFIG, [[1]], SamplingConfig(max_new_tokens=1))  # filled in below
    texts = generate_text(
        params, CONFIG, tok, prompts, SamplingConfig(max_new_tokens=20), until=[stop, "\x7f"], chunk=4, result=result
    )
    assert texts[0] == free[0][: free[0].index(stop)]
    assert result.finish_reasons[0] == "stop_string"
    # Decoding stopped soon after the stop string, not at the token limit.
    assert len(result.tokens[0]) == free[0].index(stop) + len(stop)
    other = free[1].find(stop)
    assert texts[1] == (free[1] if other < 0 else free[1][:other])
