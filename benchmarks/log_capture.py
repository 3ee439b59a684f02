"""Step-log capture time: one long line against the same bytes in short lines.

Prints a table of wall-clock seconds (median of `--repeats`) for `execution.logs.capture` taking
N MiB written to its captured stdout, as one line and as 100-byte lines, with no terminal echo.
`--old REF` also times the capture of that git revision (e.g. one before capture was made linear)
on the sizes given by `--old-sizes`, to show how its time grows with the line length.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/log_capture.py --sizes 32 128 --old main --old-sizes 4 8 16
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

from marin_lab.execution import logs as new_logs

MiB = 1 << 20


def _old_module(ref: str) -> ModuleType:
    source = subprocess.run(["git", "show", f"{ref}:marin_lab/execution/logs.py"], capture_output=True,
                            text=True, check=True).stdout
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
                os.write(1, data[at:at + MiB])
        elapsed = time.perf_counter() - start
        assert os.path.getsize(spec.url) == len(data), "the log does not hold what was written"
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[32, 128], help="MiB written, current capture")
    parser.add_argument("--old", default=None, help="a git revision whose capture is timed too")
    parser.add_argument("--old-sizes", type=int, nargs="+", default=[4, 8, 16])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    runs = [("current", new_logs, size) for size in args.sizes]
    if args.old:
        old = _old_module(args.old)
        runs += [(args.old, old, size) for size in args.old_sizes]
    rows = []
    for name, module, size in runs:
        times = {}
        for shape in ("one line", "short lines"):
            data = _payload(size * MiB, shape)
            times[shape] = statistics.median(_time_capture(module, data) for _ in range(args.repeats))
        rows.append((name, size, times["one line"], times["short lines"]))
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    out = sys.stderr
    print(f"load average {' '.join(load)}; median of {args.repeats}", file=out)
    print(f"{'capture':>10} {'MiB':>5} {'one line s':>11} {'short lines s':>14} {'ratio':>6}", file=out)
    for name, size, one, short in rows:
        print(f"{name:>10} {size:>5} {one:>11.2f} {short:>14.2f} {one / short:>6.2f}", file=out)


if __name__ == "__main__":
    main()
