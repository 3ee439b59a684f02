"""`marin-lab compile EXPERIMENT`: every training step of an experiment compiled for its TPU topology.

The experiment file is imported and planned as `--dry_run` would (nothing runs, nothing is
downloaded); each `train_lm` / `finetune_lm` step (or those `--step REGEX` selects) is compiled for
the `TpuResources` it declares, or for `--topology`, by `tpu_compile.compile_training_step`. The
report goes to stdout (text, markdown or JSON); a step that does not fit adds one `error:` line on
stderr and makes the exit code 1, as does bad input (one line naming the step and field).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys
from collections.abc import Sequence

from marin_lab.cluster.compile_report import FORMATS, render
from marin_lab.cluster.tpu_compile import HEADROOM_BYTES, StepReport, compare_remat, compile_training_step
from marin_lab.cluster.tpu_topology import GiB, parse_topology, require_libtpu, topologies_for_resources
from marin_lab.errors import MarinLabError
from marin_lab.execution import ExecutorMainConfig
from marin_lab.execution.executor import Executor, default_prefix
from marin_lab.execution.main import capture_steps
from marin_lab.models.llama import REMAT_POLICIES
from marin_lab.training.config import TrainLmConfig
from marin_lab.training.finetune import FinetuneConfig


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="marin-lab compile", description=__doc__.split("\n\n")[0])
    p.add_argument("script", help="an experiment file, e.g. experiments/tootsie_8b.py")
    p.add_argument("--step", help="regex over step names")
    p.add_argument("--topology", help="instead of each step's TpuResources: v5e-256x2, v4-2048, v5e-4, v5e:2x2, ...")
    p.add_argument("--slices", type=int, help="slices of a --topology given as a compiler name (v5e:2x2); at least 1")
    p.add_argument(
        "--remat",
        help="compare remat policies: 'all' (every gradient_checkpointing policy) or "
        "NAME[,NAME...] (full, save_dots, save_mlp_gate, ...); each step is compiled once per policy and "
        "the fastest that fits with 2 GiB of headroom per chip is marked",
    )
    p.add_argument("--format", choices=FORMATS, default="text")
    p.add_argument("--prefix", help="default: $MARIN_PREFIX, else ./marin_store (only names the steps)")
    p.add_argument("script_args", nargs="*", help="arguments passed to the script (after --)")
    return p


def _capture(script: str, script_args: Sequence[str]) -> list:
    """The experiment's steps; an experiment that fails before reaching executor_main is one line."""
    try:
        steps, _ = capture_steps(script, script_args)
    except MarinLabError:
        raise
    except SystemExit as err:  # its own argument parsing (executor_main's flags) refused the arguments
        raise MarinLabError(
            f"{script} exited (code {err.code}) before calling executor_main, with the "
            f"arguments {list(script_args)!r}; check the arguments after --"
        ) from None
    except BaseException as err:
        if isinstance(err, KeyboardInterrupt):
            raise
        where = ""
        tb = err.__traceback__
        while tb is not None:  # the deepest frame inside the experiment file
            if os.path.abspath(tb.tb_frame.f_code.co_filename) == os.path.abspath(script):
                where = f" at line {tb.tb_lineno}"
            tb = tb.tb_next
        first = next((ln.strip() for ln in str(err).splitlines() if ln.strip()), "")
        raise MarinLabError(
            f"{script}{where}: the experiment raised {type(err).__name__}"
            f"{': ' + first[:300] if first else ''} while it was loaded; fix it (`python {script} "
            "--dry_run true` shows the traceback)"
        ) from None
    return steps


def split_script_args(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(the command's own arguments, the script's: everything after the first `--`)."""
    argv = list(argv)
    if "--" not in argv:
        return argv, []
    cut = argv.index("--")
    return argv[:cut], argv[cut + 1 :]


def compile_experiment(
    script: str,
    *,
    step: str | None = None,
    topology: str | None = None,
    slices: int | None = None,
    prefix: str | None = None,
    script_args: Sequence[str] = (),
    remat: str | None = None,
) -> list[StepReport]:
    """Reports for the selected training steps of `script`; MarinLabError (one line) on bad input.

    remat: `--remat`'s value; then each step gives one report per policy (`tpu_compile.compare_remat`).
    """
    policies = parse_remat(remat) if remat is not None else None
    if not os.path.isfile(script):
        raise MarinLabError(
            f"{script}: no such experiment file; give the path of a Python file that calls "
            "executor_main, e.g. experiments/tootsie_8b.py"
        )
    if slices is not None and slices < 1:
        raise MarinLabError(f"--slices {slices}: give a number of slices of at least 1 (with --topology)")
    if slices is not None and not topology:
        raise MarinLabError(f"--slices {slices} needs --topology (a compiler name such as v5e:2x2)")
    try:
        pattern = re.compile(step) if step else None
    except re.error as err:
        raise MarinLabError(f"--step {step!r} is not a regular expression ({err}); e.g. --step 'train/.*'") from None
    require_libtpu()
    forced = parse_topology(topology, slices) if topology else None
    steps = _capture(script, script_args)
    plan = Executor(ExecutorMainConfig(prefix=prefix or default_prefix(), backend="local"), script=script).plan(steps)
    selected = [
        ps
        for ps in plan.steps
        if isinstance(ps.step.config, (TrainLmConfig, FinetuneConfig))
        and (pattern is None or pattern.search(ps.name) or pattern.search(ps.identity))
    ]
    if not selected:
        raise MarinLabError(
            f"{script}: no training step (train_lm or finetune_lm)" + (f" matches --step {step!r}" if pattern else "")
        )
    reports = []
    for ps in selected:
        targets = [forced] if forced else topologies_for_resources(ps.step.resources)
        if not targets:
            raise MarinLabError(
                f"step {ps.name!r}: field resources declares no TPU ({ps.step.resources!r}); pass "
                "--topology (e.g. v5e-256x2) to compile it for one"
            )
        function = "train_lm" if isinstance(ps.step.config, TrainLmConfig) else "finetune_lm"
        # TPU alternatives: the step compiled for every shape it may be given, its mesh's replica axis
        # over that shape's slices, as on the hosts (MESH_FOLLOWS_HARDWARE)
        follows = not forced and callable(getattr(ps.step.resources, "shapes", None))
        for target in targets:
            config = ps.step.config
            if follows:
                config = dataclasses.replace(config, mesh=config.mesh.on_slices(target.slices))
            if policies is None:
                reports.append(compile_training_step(ps.name, function, config, target))
            else:
                reports.extend(compare_remat(ps.name, function, config, target, policies))
    return reports


def parse_remat(value: str) -> list[str]:
    """`--remat`'s policies: 'all' or comma-separated names of REMAT_POLICIES."""
    names = list(REMAT_POLICIES) if value.strip() == "all" else [n.strip() for n in value.split(",") if n.strip()]
    unknown = [n for n in names if n not in REMAT_POLICIES]
    if unknown or not names:
        raise MarinLabError(
            f"--remat {value!r}: {', '.join(map(repr, unknown)) or 'no policy'} is not a remat policy; "
            f"give 'all' or names from {', '.join(REMAT_POLICIES)}"
        )
    return list(dict.fromkeys(names))


def main(argv: Sequence[str] | None = None) -> int:
    own, after = split_script_args(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(own)
    try:
        reports = compile_experiment(
            args.script,
            step=args.step,
            topology=args.topology,
            slices=args.slices,
            prefix=args.prefix,
            script_args=[*args.script_args, *after],
            remat=args.remat,
        )
    except MarinLabError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(render(reports, args.format))
    if args.remat is not None:  # a comparison: a policy that does not fit is a finding, not a failure
        unchosen = [
            step
            for step in dict.fromkeys(r.step for r in reports)
            if not any(r.chosen for r in reports if r.step == step)
        ]
        for step in unchosen:
            print(
                f"error: step {step!r}: no compared remat policy fits with {HEADROOM_BYTES / GiB:.0f} GiB of "
                "headroom per chip (without host offload); try more microbatches or more chips (mesh.fsdp)",
                file=sys.stderr,
            )
        return 1 if unchosen else 0
    failed = [r for r in reports if not r.fits]
    for r in failed:
        print(f"error: {r.not_fit_line()}", file=sys.stderr)
    return 1 if failed else 0


__all__ = ["build_parser", "compile_experiment", "main", "parse_remat"]
