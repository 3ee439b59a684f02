"""Microbatches are cut from each batch shard's own rows (train_step.split_microbatches)."""

import numpy as np
import pytest

from marin_lab.training.train_step import split_microbatches


@pytest.mark.parametrize(("ways", "microbatches"), [(1, 2), (2, 2), (8, 2), (4, 4)])
def test_each_microbatch_takes_a_block_of_every_shard(ways, microbatches):
    rows = 2 * ways * microbatches
    tokens = np.arange(rows * 3, dtype=np.int32).reshape(rows, 3)
    micro = np.asarray(split_microbatches(tokens, microbatches, ways))
    assert micro.shape == (microbatches, rows // microbatches, 3)
    shard, block = rows // ways, rows // ways // microbatches
    for k in range(microbatches):
        # Shard d of microbatch k (the rows device d holds) comes from shard d of the batch: no row moves.
        for d in range(ways):
            got = micro[k, d * block : (d + 1) * block]
            assert np.array_equal(got, tokens[d * shard + k * block : d * shard + (k + 1) * block])
    # Every row once: the accumulated gradient is the whole batch's.
    assert sorted(micro.reshape(rows, 3)[:, 0].tolist()) == tokens[:, 0].tolist()
    if ways == 1:  # one shard: the contiguous split
        assert np.array_equal(micro, tokens.reshape(microbatches, rows // microbatches, 3))
