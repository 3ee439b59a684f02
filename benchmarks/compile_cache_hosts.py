"""Reruns of one multi-process CPU training run with one JAX compilation cache: what the cache saves.

Three `run_hosts` of the tiny trainer (2 hosts x 2 devices, 4 steps) in a row, sharing a fresh
`JAX_COMPILATION_CACHE_DIR` (every program cached, whatever its compile time); prints each run's wall
seconds and the first characters of its final `param_checksum`. The first run compiles; the next
two read back what the cache holds. To compare two trees, run it from each, alternating:

    (cd TREE && PYTHONPATH=TREE python /path/to/benchmarks/compile_cache_hosts.py LABEL)
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="compile-cache-hosts-")
os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
os.environ["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "0"

from marin_lab.main.train_lm import train_lm  # noqa: E402
from marin_lab.testing.training import tiny_train_config, write_synthetic_cache  # noqa: E402
from marin_lab.training.local_hosts import run_hosts  # noqa: E402 - after the cache settings


def main() -> None:
    label = sys.argv[1] if len(sys.argv) > 1 else "this tree"
    root = tempfile.mkdtemp(prefix="compile-cache-hosts-run-")
    cache = write_synthetic_cache(os.path.join(root, "cache"))
    runs = []
    for r in range(3):
        cfg = tiny_train_config(os.path.join(root, f"out{r}"), {"c": cache}, num_train_steps=4, export_hf=False)
        started = time.perf_counter()
        result = run_hosts(cfg, fn=train_lm, hosts=2, devices_per_host=2, workdir=os.path.join(root, f"w{r}"))
        assert result.ok, "\n---\n".join(result.stderr_tails)
        runs.append((round(time.perf_counter() - started, 1), result.summary["param_checksum"][:12]))
    print(label, runs, flush=True)


if __name__ == "__main__":
    main()
