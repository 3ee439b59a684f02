"""Step-log capture time: one long line against the same bytes in short lines.

Prints a table of wall-clock seconds (median of `--repeats`) for `execution.logs.capture` taking
N MiB written to its captured stdout, as one line and as 100-byte lines, with no terminal echo.
`--old REF` also times the capture of that git revision (e.g. one before capture was made linear)
on the sizes given by `--old-sizes`, to show how its time grows with the line length.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/log_capture.py --sizes 128 --old main --old-sizes 8 16 32
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from types import ModuleType

from marin_lab.execution.run import logs as new_logs

MiB = 1 << 20
SHAPES = ("one line", "short lines")


def _old_module(ref: str) -> ModuleType:
    source = subprocess.run(
        ["git", "show", f"{ref}:marin_lab/execution/run/logs.py"], capture_output=True, text=True, check=True
    ).stdout
    path = os.path.join(tempfile.mkdtemp(prefix="old-logs-"), "old_logs.py")
    with open(path, "w") as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location("old_logs", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["old_logs"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _payload(size: int, shape: str) -> bytes:
    if shape == "one line":
        return b"x" * (size - 1) + b"\n"
    line = b"y" * 99 + b"\n"
    return line * (size // len(line))


def _time_capture(module: ModuleType, data: bytes) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        spec = module.LogSpec(url=os.path.join(tmp, "attempt-1.log"), label="bench", echo=False)
        start = time.perf_counter()
        with module.capture(spec):
            for at in range(0, len(data), MiB):
                os.write(1, data[at : at + MiB])
        elapsed = time.perf_counter() - start
        assert os.path.getsize(spec.url) == len(data), "the log does not hold what was written"
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[32, 128], help="MiB written, current capture")
    parser.add_argument("--old", default=None, help="a git revision whose capture is timed too")
    parser.add_argument("--old-sizes", type=int, nargs="+", default=[4, 8, 16])
    parser.add_argument("--old-shapes", nargs="+", default=["one line"], choices=SHAPES)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    runs = [("current", new_logs, size, SHAPES) for size in args.sizes]
    if args.old:
        old = _old_module(args.old)
        runs += [(args.old, old, size, tuple(args.old_shapes)) for size in args.old_sizes]
    # Rows are printed as they finish (to stderr: stdout is what is being captured), with the load
    # at that moment: the old capture's long lines can take many minutes.
    out = sys.stderr
    print(f"median of {args.repeats}; seconds", file=out)
    print(f"{'capture':>10} {'MiB':>5} {'shape':>12} {'seconds':>8}  load (1, 5, 15 min)", file=out, flush=True)
    for name, module, size, shapes in runs:
        for shape in shapes:
            data = _payload(size * MiB, shape)
            seconds = statistics.median(_time_capture(module, data) for _ in range(args.repeats))
            with open("/proc/loadavg") as f:
                load = " ".join(f.read().split()[:3])
            print(f"{name:>10} {size:>5} {shape:>12} {seconds:>8.2f}  {load}", file=out, flush=True)


if __name__ == "__main__":
    main()
