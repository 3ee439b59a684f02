"""The stateless data mixture: permutations, phase counts, resumable batches, bad caches."""

import numpy as np
import pytest

from marin_lab.testing.training import write_synthetic_cache
from marin_lab.training.data import DataConfig, MixtureLoader, MixturePhase, feistel_permute, mixture_counts
from marin_lab.training.token_cache import TokenCache, TokenCacheError, write_token_cache


@pytest.mark.parametrize("n", [1, 2, 7, 64, 1000, 4097])
def test_feistel_is_a_permutation(n):
    out = feistel_permute(np.arange(n), n, key=42)
    assert sorted(out.tolist()) == list(range(n))


def test_feistel_depends_on_key():
    a, b = feistel_permute(np.arange(500), 500, key=1), feistel_permute(np.arange(500), 500, key=2)
    assert not np.array_equal(a, b)
    assert not np.array_equal(a, np.arange(500))


def test_mixture_counts_are_exact():
    counts = mixture_counts({"a": 0.7, "b": 0.2, "c": 0.1}, ["a", "b", "c"], 16)
    assert sum(counts.values()) == 16 and counts == {"a": 11, "b": 3, "c": 2}
    with pytest.raises(ValueError, match="all zero"):
        mixture_counts({"a": 0.0}, ["a"], 4)


@pytest.fixture(scope="module")
def two_caches(tmp_path_factory):
    root = tmp_path_factory.mktemp("caches")
    return {
        "a": write_synthetic_cache(str(root / "a"), seed=0),
        "b": write_synthetic_cache(str(root / "b"), seed=5, train_docs=100),
    }


def test_batches_are_a_function_of_the_step(two_caches):
    cfg = DataConfig(caches=two_caches, weights={"a": 0.5, "b": 0.5}, seed=3)
    first, second = MixtureLoader(cfg, 32, 8), MixtureLoader(cfg, 32, 8)
    # Out of order and from a fresh loader: same bytes.
    for step in (5, 0, 17, 5):
        np.testing.assert_array_equal(first.batch(step), second.batch(step))
    assert first.batch(0).shape == (8, 33) and first.batch(0).dtype == np.int32
    assert not np.array_equal(first.batch(0), first.batch(1))


def test_phases_change_the_mixture_and_offsets_are_closed_form(two_caches):
    cfg = DataConfig(
        caches=two_caches,
        weights={"a": 1.0, "b": 0.0},
        phases=(MixturePhase(start_step=4, weights={"a": 0.25, "b": 0.75}),),
    )
    loader = MixtureLoader(cfg, 32, 8)
    assert loader.counts_at(3) == {"a": 8, "b": 0}
    assert loader.counts_at(4) == {"a": 2, "b": 6}
    replay = {"a": 0, "b": 0}
    for step in range(10):
        assert loader.consumed_before(step) == replay
        for k, v in loader.counts_at(step).items():
            replay[k] += v


def test_one_epoch_sees_every_window_once(tmp_path):
    path = write_synthetic_cache(str(tmp_path / "c"), train_docs=40, docs_per_shard=15)
    loader = MixtureLoader(DataConfig(caches={"c": path}), 16, 1)
    n = loader.splits["c"].num_sequences
    everything = sorted(map(bytes, loader.splits["c"].sequences(np.arange(n))))
    first_epoch = sorted(bytes(loader.batch(s)[0]) for s in range(n))
    second_epoch = [bytes(loader.batch(s)[0]) for s in range(n, 2 * n)]
    assert first_epoch == everything
    assert sorted(second_epoch) == everything
    # A new epoch is a new order, not a replay of the first.
    assert second_epoch != [bytes(loader.batch(s)[0]) for s in range(n)]


def test_base_offsets_continue_an_earlier_run(two_caches):
    cfg = DataConfig(caches=two_caches, weights={"a": 1.0, "b": 1.0})
    whole = MixtureLoader(cfg, 32, 8)
    continued = MixtureLoader(cfg, 32, 8, base_step=6, base_offsets=whole.consumed_before(6))
    np.testing.assert_array_equal(whole.batch(9), continued.batch(9))


def test_too_short_cache_names_the_field(tmp_path):
    write_token_cache(str(tmp_path / "short"), {"train": [[1, 2, 3]]}, vocab_size=10, eos_id=9)
    with pytest.raises(TokenCacheError, match=r"data.caches\['s'\].*seq_len"):
        MixtureLoader(DataConfig(caches={"s": str(tmp_path / "short")}), 64, 4)


def test_missing_cache_says_what_to_do(tmp_path):
    with pytest.raises(TokenCacheError, match="tokenize step"):
        TokenCache(str(tmp_path / "nowhere"))


def test_remote_cache_reads_the_same_windows(tmp_path):
    docs = {"train": [np.arange(i, i + 50) % 200 for i in range(30)]}
    write_token_cache(str(tmp_path / "local"), docs, vocab_size=256, eos_id=255, docs_per_shard=7)
    write_token_cache("memory://tr-cache/remote", docs, vocab_size=256, eos_id=255, docs_per_shard=7)
    local = TokenCache(str(tmp_path / "local")).split("train", 20)
    remote = TokenCache("memory://tr-cache/remote").split("train", 20)
    idx = np.arange(local.num_sequences)
    np.testing.assert_array_equal(local.sequences(idx), remote.sequences(idx))


def test_a_host_reads_only_its_rows_and_they_match_the_global_batch(two_caches):
    loader = MixtureLoader(DataConfig(caches=two_caches, seed=3), seq_len=8, batch_size=8)
    whole = loader.batch(5)
    rows = np.array([6, 7, 2, 3])  # e.g. the rows of host 1 of 2, devices in any order
    assert np.array_equal(loader.batch(5, rows=rows), whole[rows])
