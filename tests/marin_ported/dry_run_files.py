"""Dry-run experiment files in one process and write what each planned as JSON lines.

    python tests/marin_ported/dry_run_files.py OUT.jsonl PREFIX FILE...

Each FILE runs as `python FILE --dry_run true --prefix PREFIX/<file stem>` would run it (as
`__main__`, with that argv); one interpreter serves all of them, so JAX and the data libraries are
imported once. Per file one line: whether it planned, the error (type and message) if not, what it
printed, and every `ExecutorStep` it defined (name, function, resources, and for a training step
the model's vocabulary and the sequence length).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import runpy
import sys
import traceback
from typing import Any

from marin_lab.execution import ExecutorStep


def _describe(step: ExecutorStep) -> dict[str, Any]:
    out: dict[str, Any] = {"name": step.name, "fn": getattr(step.fn, "__name__", repr(step.fn)),
                           "resources": repr(step.resources)}
    model = getattr(step.config, "model", None)
    if model is not None and hasattr(model, "vocab_size"):
        out.update(vocab_size=model.vocab_size, seq_len=step.config.seq_len, batch_size=step.config.batch_size,
                   num_params=model.num_params(), tpu_type=step.config.tpu_type)
    tokenizer = getattr(step.config, "tokenizer", None)
    if isinstance(tokenizer, str):
        out["tokenizer"] = tokenizer
    return out


def dry_run(script: str, prefix: str) -> dict[str, Any]:
    saved = sys.argv
    sys.argv = [script, "--dry_run", "true", "--prefix", prefix]
    stdout, stderr = io.StringIO(), io.StringIO()
    result: dict[str, Any] = {"file": os.path.basename(script)}
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            namespace = runpy.run_path(script, run_name="__main__")
        result.update(ok=True, steps=[_describe(v) for v in namespace.values() if isinstance(v, ExecutorStep)])
    except BaseException as err:  # a file that does not port: record why, go on to the next one
        result.update(ok=False, error=f"{type(err).__name__}: {err}",
                      where=traceback.extract_tb(err.__traceback__)[-1].filename)
    finally:
        sys.argv = saved
    result.update(stdout=stdout.getvalue(), stderr=stderr.getvalue()[-4000:])
    return result


def main(argv: list[str]) -> int:
    out_path, prefix, *scripts = argv
    with open(out_path, "w") as out:
        for script in scripts:
            stem = os.path.splitext(os.path.basename(script))[0]
            out.write(json.dumps(dry_run(script, os.path.join(prefix, stem))) + "\n")
            out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
