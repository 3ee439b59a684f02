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
    finish_path: str | None = None
    """When set too: after "released", wait until this file exists before finishing."""
    fail: bool = False
    use_jax: bool = False
    """Import JAX and list devices (on a CPU host JAX logs that it found no TPU)."""


def _wait_for(path: str) -> None:
    deadline = time.time() + 120
    while not os.path.exists(path) and time.time() < deadline:
        time.sleep(0.05)


def chatty(cfg: ChattyConfig) -> dict:
    print(f"stdout says {cfg.word}", flush=True)
    print(f"stderr says {cfg.word}", file=sys.stderr, flush=True)
    logger.info("a log record says %s", cfg.word)
    print(f"the key is {os.environ.get('WATCH_TEST_API_KEY', 'unset')}; a token sk-{'x' * 24}", flush=True)
    subprocess.run(["echo", f"a subprocess says {cfg.word}"], check=True)
    # A progress bar as tqdm draws it: one line redrawn in place with carriage returns.
    for i in range(200):
        sys.stderr.write(f"\rprogress {i + 1}/200")
        sys.stderr.flush()
    sys.stderr.write("\n")
    if cfg.release_path:
        # The last line of both pipes: stdout and stderr are read by two threads, so on a busy
        # machine a line written earlier on one pipe (the subprocess's) can be taken after a later
        # line of the other; whichever is taken last, the latest line is then this one.
        print("waiting for release", flush=True)
        print("waiting for release", file=sys.stderr, flush=True)
        _wait_for(cfg.release_path)
        print("released", flush=True)
    if cfg.finish_path:
        _wait_for(cfg.finish_path)
    if cfg.use_jax:
        import jax

        print(f"devices: {jax.devices()}", flush=True)
    if cfg.fail:
        raise RuntimeError(f"chatty failed on purpose ({cfg.word})")
    with fsspec.open(f"{cfg.output_path}/data.txt", "w") as f:
        f.write(cfg.word)
    return {"word": cfg.word}
