"""Mark the unit tests that a `--durations=0` log shows as slow with `@pytest.mark.slow`.

`make test-fast` runs the unit tests not marked slow, ray, browser or gcs; this keeps that tier
fast as tests are added. Run the unit tests with `--durations=0` into a log, then:

    python scripts/mark_slow_tests.py LOG --threshold-s 1.5 && ruff check --fix tests/unit

Every test function whose setup + call + teardown took at least the threshold gets the marker
(once; a parametrized test's cases are summed per case, and the function is marked if any case
is slow). The threshold is in the log's seconds: on a loaded machine pass a larger one.
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
from pathlib import Path

LINE = re.compile(r"^([0-9.]+)s (?:call|setup|teardown)\s+(\S+)")


def slow_functions(log: str, threshold_s: float) -> dict[str, set[str]]:
    """{test file: names of its test functions with a case at or over the threshold}."""
    per_case: collections.Counter[str] = collections.Counter()
    for line in Path(log).read_text().splitlines():
        m = LINE.match(line)
        if m:
            per_case[m.group(2)] += float(m.group(1))
    slow: dict[str, set[str]] = collections.defaultdict(set)
    for node, seconds in per_case.items():
        if seconds >= threshold_s:
            path, _, rest = node.partition("::")
            slow[path].add(rest.split("::")[-1].split("[")[0])
    return slow


def mark(path: Path, names: set[str]) -> list[str]:
    """Insert `@pytest.mark.slow` above each named test function that lacks it; the names marked."""
    lines = path.read_text().splitlines(keepends=True)
    marked = []
    for i in range(len(lines) - 1, -1, -1):
        m = re.match(r"^(\s*)def (test_\w+)\(", lines[i])
        if not m or m.group(2) not in names:
            continue
        start = i
        while start > 0 and lines[start - 1].lstrip().startswith("@"):
            start -= 1
        if any("pytest.mark.slow" in ln for ln in lines[start:i]):
            continue
        lines.insert(start, f"{m.group(1)}@pytest.mark.slow\n")
        marked.append(m.group(2))
    if marked and not any(ln.rstrip() == "import pytest" for ln in lines):
        first = next(
            i
            for i, ln in enumerate(lines)
            if ln.startswith(("import ", "from ")) and not ln.startswith("from __future__")
        )
        lines.insert(first, "import pytest\n")  # `ruff check --fix` puts it in its place
    path.write_text("".join(lines))
    return marked


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("log", help="pytest output with --durations=0")
    p.add_argument("--threshold-s", type=float, required=True, help="seconds per test case")
    args = p.parse_args(argv)
    for file, names in sorted(slow_functions(args.log, args.threshold_s).items()):
        if not file.startswith("tests/unit/"):
            continue
        done = mark(Path(file), names)
        if done:
            print(f"{file}: {', '.join(sorted(done))}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
