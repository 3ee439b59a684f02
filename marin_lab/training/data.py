"""Batches from a mixture of token caches, computed from the step number alone.

Nothing here keeps state between steps, which is what makes resume exact: the batch of step s is
a pure function of (config, s).

- Each step's batch of B sequences is split among the datasets in proportion to the mixture
  weights of the phase that step belongs to (largest-remainder rounding, so counts are exact
  integers that sum to B).
- Dataset d's k-th sequence overall (k counts across all earlier steps, in closed form from the
  phase table) is window `perm(k mod n_d)` of that dataset, where `perm` is a keyed Feistel
  permutation of [0, n_d) that changes each epoch: every window is seen once per epoch, in an
  order that looks random, with no index array to build or store.
- Rows of the batch are then shuffled with a generator seeded by (seed, step).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Mapping
from typing import Literal, overload

import numpy as np

from marin_lab.training.token_cache import CacheSplit, TokenCache, TokenCacheError
from marin_lab.versioning import field_hints, versioned_field

logger = logging.getLogger(__name__)

_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


@dataclasses.dataclass(frozen=True)
class MixturePhase:
    """Mixture weights that apply from `start_step` until the next phase."""

    start_step: int
    """First step (global) of this phase."""
    weights: dict[str, float]
    """Dataset name -> weight (normalised; 0 removes a dataset)."""


@field_hints
@dataclasses.dataclass(frozen=True)
class DataConfig:
    """Which token caches to train on and how to mix them."""

    caches: dict[str, str] = versioned_field()
    """Dataset name -> token cache path (the tokenize step's output)."""
    weights: dict[str, float] | None = versioned_field(None)
    """Mixture weights; None weighs datasets by their number of training tokens."""
    phases: tuple[MixturePhase, ...] = versioned_field(())
    """Later mixtures: each replaces `weights` from its start_step on."""
    seed: int = versioned_field(0)
    """Data-order seed (independent of the model-initialisation seed)."""
    train_split: str = versioned_field("train")
    """Split the trainer reads."""
    validation_split: str = "validation"
    """Split the evaluator reads."""


def held_out(cache: TokenCache) -> str:
    """How the tokenize step split `cache`'s documents, for messages ("validation_fraction=0.01
    held out 0 of 36 documents"); '' for a cache that records no validation_fraction."""
    fraction = (cache.ledger.get("split") or {}).get("validation_fraction")
    if fraction is None:
        return ""
    counts = {name: int(entry.get("documents", 0)) for name, entry in cache.ledger.get("splits", {}).items()}
    return f"validation_fraction={fraction} held out {counts.get('validation', 0)} of {sum(counts.values())} documents"


def validation_windows(cache: TokenCache, split: str, seq_len: int) -> int:
    """Windows of seq_len + 1 tokens in `cache`'s validation `split` (0 when it has no such split)."""
    return cache.split(split, seq_len).num_sequences if split in cache.splits else 0


def _splitmix(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        x = (x + np.uint64(0x9E3779B97F4A7C15)) & _MASK64
        x = ((x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & _MASK64
        x = ((x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & _MASK64
        return x ^ (x >> np.uint64(31))


def feistel_permute(x: np.ndarray, n: int, key: int, rounds: int = 4) -> np.ndarray:
    """A keyed bijection of [0, n): a balanced Feistel network with cycle walking."""
    if n <= 1:
        return np.zeros_like(np.asarray(x, dtype=np.int64))
    half = max((int(n - 1).bit_length() + 1) // 2, 1)
    mask = np.uint64((1 << half) - 1)
    round_keys = _splitmix(np.arange(rounds, dtype=np.uint64) + np.uint64(key & 0xFFFFFFFFFFFF) * np.uint64(1 << 8))

    def once(v: np.ndarray) -> np.ndarray:
        left, right = v >> np.uint64(half), v & mask
        for rk in round_keys:
            left, right = right, left ^ (_splitmix(right ^ rk) & mask)
        return (left << np.uint64(half)) | right

    y = once(np.asarray(x, dtype=np.uint64))
    # Cycle walking: the Feistel domain is at most 4n, so a few re-applications land in range.
    out_of_range = y >= np.uint64(n)
    while out_of_range.any():
        y[out_of_range] = once(y[out_of_range])
        out_of_range = y >= np.uint64(n)
    return y.astype(np.int64)


def mixture_counts(weights: Mapping[str, float], names: list[str], batch_size: int) -> dict[str, int]:
    """Integer sequences per dataset that sum to batch_size (largest remainder, ties by name)."""
    w = np.array([max(float(weights.get(n, 0.0)), 0.0) for n in names])
    if w.sum() <= 0:
        raise ValueError(f"data mixture weights {dict(weights)} are all zero for datasets {names}")
    exact = w / w.sum() * batch_size
    counts = np.floor(exact).astype(int)
    order = sorted(range(len(names)), key=lambda i: (-(exact[i] - counts[i]), names[i]))
    for i in order[: batch_size - counts.sum()]:
        counts[i] += 1
    return {n: int(c) for n, c in zip(names, counts, strict=True)}


class MixtureLoader:
    """Computes the [batch, seq_len + 1] token array of any step."""

    def __init__(
        self,
        config: DataConfig,
        seq_len: int,
        batch_size: int,
        *,
        base_step: int = 0,
        base_offsets: Mapping[str, int] | None = None,
    ):
        """base_step/base_offsets: where a run initialised from another run's checkpoint starts."""
        if not config.caches:
            raise TokenCacheError("data.caches is empty; give at least one token cache")
        self.config, self.seq_len, self.batch_size = config, seq_len, batch_size
        self.names = sorted(config.caches)
        self.splits: dict[str, CacheSplit] = {}
        for name in self.names:
            split = TokenCache(config.caches[name]).split(config.train_split, seq_len)
            if split.num_sequences == 0:
                note = held_out(split.cache)
                raise TokenCacheError(
                    f"data.caches[{name!r}] ({config.caches[name]}) has no {config.train_split!r} "
                    f"sequence of seq_len+1={seq_len + 1} tokens (its shards hold "
                    f"{split.cache.num_tokens(config.train_split)} tokens{'; ' + note if note else ''}); "
                    + (
                        "lower seq_len, tokenize more data, or lower validation_fraction in its tokenize step"
                        if note
                        else "lower seq_len or tokenize more data"
                    )
                )
            self.splits[name] = split
        default = config.weights or {n: float(s.num_sequences) for n, s in self.splits.items()}
        unknown = {k for p in config.phases for k in p.weights} | set(config.weights or {})
        unknown -= set(self.names)
        if unknown:
            raise TokenCacheError(f"data weights name datasets {sorted(unknown)} not in data.caches {self.names}")
        table = [(0, default)] + [(p.start_step, p.weights) for p in sorted(config.phases, key=lambda p: p.start_step)]
        # (start, counts) per phase, phases that start before base_step clipped to it.
        self.phases = [(start, mixture_counts(w, self.names, batch_size)) for start, w in table]
        self.base_step = base_step
        self.base_offsets = {n: int((base_offsets or {}).get(n, 0)) for n in self.names}

    def counts_at(self, step: int) -> dict[str, int]:
        current = self.phases[0][1]
        for start, counts in self.phases:
            if start <= step:
                current = counts
        return current

    def consumed_before(self, step: int) -> dict[str, int]:
        """Sequences each dataset has contributed to steps [0 of this run, step): closed form."""
        out = dict(self.base_offsets)
        bounds = [s for s, _ in self.phases[1:]] + [math.inf]
        for (start, counts), end in zip(self.phases, bounds, strict=True):
            lo, hi = max(start, self.base_step), min(end, step)
            if hi > lo:
                for n in self.names:
                    out[n] += counts[n] * int(hi - lo)
        return out

    @overload
    def batch(self, step: int, rows: np.ndarray | None = None, *, loss_mask: Literal[False] = False) -> np.ndarray: ...

    @overload
    def batch(
        self, step: int, rows: np.ndarray | None = None, *, loss_mask: Literal[True]
    ) -> tuple[np.ndarray, np.ndarray]: ...

    def batch(
        self, step: int, rows: np.ndarray | None = None, *, loss_mask: bool = False
    ) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
        """The [batch, seq_len + 1] tokens of `step`, or only the global `rows` of it, in that order;
        with loss_mask, also their 0/1 loss masks (see token_cache).

        Which window each row holds is cheap index arithmetic over the whole batch; only the rows
        asked for are read, so each host of a multi-host run reads just its own part.
        """
        counts, before = self.counts_at(step), self.consumed_before(step)
        sources = []  # (dataset index, window index) of each row of the unshuffled batch
        for d_index, name in enumerate(self.names):
            if counts[name] == 0:
                continue
            n = self.splits[name].num_sequences
            k = before[name] + np.arange(counts[name], dtype=np.int64)
            epochs, pos = k // n, k % n
            idx = np.empty_like(pos)
            for epoch in np.unique(epochs):
                sel = epochs == epoch
                key = (self.config.seed * 1_000_003 + d_index) * 65_537 + int(epoch)
                idx[sel] = feistel_permute(pos[sel], n, key)
            sources += [(d_index, int(i)) for i in idx]
        order = np.random.default_rng([self.config.seed, step]).permutation(self.batch_size)
        wanted = order if rows is None else order[np.asarray(rows, dtype=np.int64)]
        out = np.empty((len(wanted), self.seq_len + 1), dtype=np.int32)
        masks = np.empty((len(wanted), self.seq_len + 1), dtype=np.uint8) if loss_mask else None
        picked = [sources[i] for i in wanted]
        for d_index, name in enumerate(self.names):
            mine = [j for j, (d, _) in enumerate(picked) if d == d_index]
            if mine:
                windows = np.asarray([picked[j][1] for j in mine], dtype=np.int64)
                out[mine] = self.splits[name].sequences(windows)
                if masks is not None:
                    masks[mine] = self.splits[name].loss_masks(windows)
        return out if masks is None else (out, masks)
