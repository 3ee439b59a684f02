"""Generation throughput: KV-cache decoding vs recomputing the full forward pass for every token.

Question: what does the cache buy on CPU for a small model? Both sides decode greedily the same
batch of prompts for the same number of new tokens, and must produce the same tokens.

- cached: `generate_tokens` (prefill + the jitted single-token decode loop);
- recompute: the model's `forward` over the whole sequence so far, padded to one fixed length
  (so it compiles once, like the cached side), argmax at each row's last position, one call per
  new token.

Both are compiled before timing (a warm-up run each); each repeat times both sides, alternating
which goes first; the script prints the median tokens/s of each and their ratio.

    python benchmarks/generate_throughput.py [--repeats 3] [--new_tokens 128] [--batch 4]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from marin_lab.models.generate import SamplingConfig, generate_tokens
from marin_lab.models.llama import LlamaConfig, forward, init_params


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--new_tokens", type=int, default=128)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--prompt_len", type=int, default=64)
    args = parser.parse_args()

    config = LlamaConfig(
        vocab_size=4096,
        hidden_dim=256,
        intermediate_dim=768,
        num_layers=4,
        num_heads=8,
        num_kv_heads=4,
        max_seq_len=512,
    )
    params = init_params(config, jax.random.key(0))
    rng = np.random.default_rng(0)
    # Prompts of different lengths, up to prompt_len.
    prompts = [
        rng.integers(0, config.vocab_size, size=int(n)).tolist()
        for n in np.linspace(args.prompt_len // 2, args.prompt_len, args.batch)
    ]
    sampling = SamplingConfig(max_new_tokens=args.new_tokens)
    total = args.prompt_len + args.new_tokens
    length = 1 << (total - 1).bit_length()  # the recompute side's one padded length

    fwd = jax.jit(lambda p, t: forward(p, t, config))

    def cached() -> list[list[int]]:
        return generate_tokens(params, config, prompts, sampling, batch_size=args.batch)

    def recompute() -> list[list[int]]:
        tokens = np.zeros((args.batch, length), np.int32)
        ends = np.asarray([len(p) for p in prompts])
        for r, p in enumerate(prompts):
            tokens[r, : len(p)] = p
        out: list[list[int]] = [[] for _ in prompts]
        for _ in range(args.new_tokens):
            logits = fwd(params, jnp.asarray(tokens))
            nxt = np.asarray(jnp.argmax(logits[jnp.arange(args.batch), ends - 1], axis=-1))
            for r in range(args.batch):
                tokens[r, ends[r]] = nxt[r]
                out[r].append(int(nxt[r]))
            ends = ends + 1
        return out

    a, b = cached(), recompute()  # warm-up: compile both
    agree = sum(x == y for x, y in zip(a, b, strict=False))
    rates: dict[str, list[float]] = {"cached": [], "recompute": []}
    sides = {"cached": cached, "recompute": recompute}
    for i in range(args.repeats):
        for name in ("cached", "recompute") if i % 2 == 0 else ("recompute", "cached"):
            started = time.perf_counter()
            sides[name]()
            rates[name].append(args.batch * args.new_tokens / (time.perf_counter() - started))
    med = {k: statistics.median(v) for k, v in rates.items()}
    print(
        f"model: {config.num_params():,} params ({config.num_layers} layers, d={config.hidden_dim}, "
        f"vocab {config.vocab_size}); batch {args.batch}, prompts {len(prompts[0])}..{len(prompts[-1])} tokens, "
        f"{args.new_tokens} new tokens; recompute length {length}"
    )
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cpus, "
        f"jax {jax.__version__} on {jax.default_backend()}; load {os.getloadavg()[0]:.1f}"
    )
    print(f"same tokens on {agree}/{len(prompts)} rows")
    for name in ("cached", "recompute"):
        print(f"{name:10s} median {med[name]:8.1f} tokens/s  (runs: {', '.join(f'{r:.1f}' for r in rates[name])})")
    print(f"ratio cached / recompute: {med['cached'] / med['recompute']:.1f}x")


if __name__ == "__main__":
    main()
