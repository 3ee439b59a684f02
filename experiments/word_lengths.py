"""Do longer documents use longer words? Baseline: none, first look."""

import dataclasses
import json

import fsspec

from marin_lab.execution import ExecutorStep, executor_main, output_path_of, this_output_path, versioned


@dataclasses.dataclass(frozen=True)
class SplitConfig:
    source: str
    output_path: str
    min_chars: int  # versioned below: it changes the data


def split_docs(cfg: SplitConfig) -> dict:
    text = fsspec.open(cfg.source, "r").open().read()
    docs = [p for p in text.split("\n\n") if len(p) >= cfg.min_chars]
    with fsspec.open(f"{cfg.output_path}/docs.json", "w") as f:
        json.dump(docs, f)
    return {"documents": len(docs)}


@dataclasses.dataclass(frozen=True)
class StatsConfig:
    input_path: str
    output_path: str


def word_stats(cfg: StatsConfig) -> dict:
    docs = json.load(fsspec.open(f"{cfg.input_path}/docs.json", "r").open())
    rows = [(len(d), sum(map(len, d.split())) / max(1, len(d.split()))) for d in docs]
    with fsspec.open(f"{cfg.output_path}/stats.json", "w") as f:
        json.dump(rows, f)
    return {"rows": len(rows)}


def summarize(cfg: StatsConfig) -> dict:
    rows = json.load(fsspec.open(f"{cfg.input_path}/stats.json", "r").open())
    long = [w for n, w in rows if n > 500]
    short = [w for n, w in rows if n <= 500]
    out = {"long": sum(long) / max(1, len(long)), "short": sum(short) / max(1, len(short))}
    with fsspec.open(f"{cfg.output_path}/summary.json", "w") as f:
        json.dump(out, f)
    return out


docs = ExecutorStep(
    "wl/docs",
    split_docs,
    SplitConfig(
        source=versioned("file:///usr/share/common-licenses/GPL-3"),
        output_path=this_output_path(),
        min_chars=versioned(40),
    ),
)
stats = ExecutorStep("wl/stats", word_stats, StatsConfig(output_path_of(docs), this_output_path()))
summary = ExecutorStep("wl/summary", summarize, StatsConfig(output_path_of(stats), this_output_path()))

if __name__ == "__main__":
    executor_main(steps=[summary], description="word length vs document length")
