"""Step functions that talk (stdout, stderr, logging, a subprocess, a progress bar), for the log tests."""

from __future__ import annotations

import dataclasses
import logging
import os
import subprocess
import sys
import time

import fsspec

logger = logging.getLogger("tests.watch_steps")


@dataclasses.dataclass(frozen=True)
class ChattyConfig:
    output_path: str
    word: str
    release_path: str | None = None
    """When set: say "waiting" and wait (up to 120 s) until this file exists, then go on."""
    fail: bool = False


def chatty(cfg: ChattyConfig) -> dict:
    print(f"stdout says {cfg.word}", flush=True)
    print(f"stderr says {cfg.word}", file=sys.stderr, flush=True)
    logger.info("a log record says %s", cfg.word)
    subprocess.run(["echo", f"a subprocess says {cfg.word}"], check=True)
    # A progress bar as tqdm draws it: one line redrawn in place with carriage returns.
    for i in range(200):
        sys.stderr.write(f"\rprogress {i + 1}/200")
        sys.stderr.flush()
    sys.stderr.write("\n")
    if cfg.release_path:
        print("waiting for release", flush=True)
        deadline = time.time() + 120
        while not os.path.exists(cfg.release_path) and time.time() < deadline:
            time.sleep(0.05)
        print("released", flush=True)
    if cfg.fail:
        raise RuntimeError(f"chatty failed on purpose ({cfg.word})")
    with fsspec.open(f"{cfg.output_path}/data.txt", "w") as f:
        f.write(cfg.word)
    return {"word": cfg.word}
