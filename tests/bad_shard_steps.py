"""A sharded step whose shards fail while their names are listed in a poison file: a stand-in for a
flaky store or node, for the `marin-lab rerun-shards` tests (importable by worker processes)."""

from __future__ import annotations

import dataclasses
import os

from marin_lab.io import fs as mfs
from marin_lab.processing.quarantine import Quarantine, ShardPolicy
from marin_lab.processing.shards import mark_shard_done, read_shard_done


@dataclasses.dataclass(frozen=True)
class CopyShardsConfig:
    output_path: str
    shards: tuple[str, ...]
    poison_file: str
    """Unversioned: shards named in this file (one per line) raise, as if their input could not be read."""
    log_path: str
    """Unversioned: each execution of a shard appends its name here (to count what ran)."""
    shard_policy: ShardPolicy | None = None


def _shard(task: tuple[str, CopyShardsConfig]) -> dict:
    name, cfg = task
    out = mfs.join(cfg.output_path, "data", name)
    done = read_shard_done(out)
    if done is not None:
        return {**done, "reused": True}
    fd = os.open(cfg.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(fd, f"{name}\n".encode())
    os.close(fd)
    with open(cfg.poison_file) as f:
        if name in f.read().split():
            raise OSError(f"{name}: the store did not answer")
    mfs.atomic_write_bytes(out, name.upper().encode())
    mark_shard_done(out, {"shard": name})
    return {"shard": name, "reused": False}


def copy_shards(cfg: CopyShardsConfig) -> dict:
    quarantine = Quarantine("copy_shards", cfg.output_path, cfg.shard_policy)
    results = quarantine.map(
        _shard, [(n, cfg) for n in cfg.shards], num_workers=2, desc="copy_shards", labels=list(cfg.shards)
    )
    left_out = quarantine.finish()
    done = [r for r in results if r is not None]
    return {"shards": len(done), "reused": sum(r["reused"] for r in done), "bad_shards": left_out}
