"""Each Tootsie 8B phase compiled for its declared TPUs on this machine (libtpu, no TPU attached).

Prints the text report and writes the same reports as JSON and Markdown (the table docs quote),
plus the machine's load before and after. Memory, collectives and FLOPs are facts of the compiled
program and do not depend on the load; `compile_s` does (`compile_cpu_s` much less).

    python benchmarks/tpu_compile_tootsie.py --out benchmarks/results/tpu_compile_tootsie
    python benchmarks/tpu_compile_tootsie.py --step kestrel --topology v5e-256x2
    python benchmarks/tpu_compile_tootsie.py --step kestrel --remat full,save_mlp_gate --out ...
"""

from __future__ import annotations

import argparse
import json
import os
import time

from marin_lab.cluster.compile_command import compile_experiment
from marin_lab.cluster.compile_report import as_json, as_markdown, as_text

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--experiment", default=os.path.join(ROOT, "experiments", "tootsie_8b.py"))
    parser.add_argument("--step", help="regex over step names (default: every training step)")
    parser.add_argument("--topology", help="instead of each step's TpuResources")
    parser.add_argument("--remat", help="compare remat policies ('all' or NAME[,NAME]), as marin-lab compile --remat")
    parser.add_argument("--out", help="write OUT.json, OUT.md and OUT.txt")
    args = parser.parse_args()
    started, load_before = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), _load()
    reports = compile_experiment(args.experiment, step=args.step, topology=args.topology, remat=args.remat)
    header = f"{started}; load average before {load_before}, after {_load()}"
    text = as_text(reports)
    print(header)
    print(text)
    if args.out:
        with open(args.out + ".json", "w") as f:
            json.dump({"measured": header, **json.loads(as_json(reports))}, f, indent=1)
        with open(args.out + ".md", "w") as f:
            f.write(f"{header}\n\n{as_markdown(reports)}\n")
        with open(args.out + ".txt", "w") as f:
            f.write(f"{header}\n{text}\n")


if __name__ == "__main__":
    main()
