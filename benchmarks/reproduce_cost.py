"""What `marin-lab reproduce --deep` costs against a plain run of the same experiment.

Question: reproducing re-executes every step; how much does the comparison (manifests of the
scratch outputs, JSON reads without volatile fields) add on top of the run itself?

The experiment is tests/integration/test_reproduce.py's pipeline (download -> extract -> tokenizer
-> tokenize -> train 4 steps -> evaluate, on 24 made-up HTML pages), local backend. Each round, in
one process: a plain run into a fresh prefix, then `reproduce --deep` of a recorded run into a
fresh scratch prefix; the order of the two sides alternates round by round. Printed: each side's
median seconds and the ratio reproduce / plain.

    python benchmarks/reproduce_cost.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from marin_lab.cli import main as cli_main  # noqa: E402
from tests.data_fixtures import make_html_site  # noqa: E402
from tests.integration.test_reproduce import PIPELINE, _record, _script  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="reproduce-cost-"))
    make_html_site(root / "site", n=24)
    os.environ["SITE"] = str(root / "site")
    script = _script(root / "script", PIPELINE)
    recorded = _record(script, str(root / "recorded"))  # the record every reproduction reads
    times: dict[str, list[float]] = {"plain": [], "reproduce": []}
    for i in range(args.rounds):
        order = ["plain", "reproduce"] if i % 2 == 0 else ["reproduce", "plain"]
        for side in order:
            started = time.perf_counter()
            if side == "plain":
                _record(script, str(root / f"plain-{i}"))
            else:
                rc = cli_main(["reproduce", recorded, "--into", str(root / f"scratch-{i}"), "--deep"])
                if rc != 0:
                    raise SystemExit(f"reproduce exited {rc}: the benchmark's pipeline did not reproduce")
            times[side].append(time.perf_counter() - started)
            print(f"round {i} {side}: {times[side][-1]:.1f} s", file=sys.stderr)
    plain, again = statistics.median(times["plain"]), statistics.median(times["reproduce"])
    print(
        f"plain run {plain:.1f} s, reproduce --deep {again:.1f} s (medians of {args.rounds}); "
        f"ratio {again / plain:.2f}; load {os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    main()
