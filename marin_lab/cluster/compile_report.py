"""How `marin-lab compile` prints its reports: text for a terminal, Markdown for a pull request,
JSON (`{"steps": [...]}`) for tests and the browser."""

from __future__ import annotations

import json
from collections.abc import Sequence

from marin_lab.cluster.tpu_compile import StepReport
from marin_lab.cluster.tpu_topology import GiB

FORMATS = ("text", "markdown", "json")


def _gib(n: float | None) -> str:
    return "?" if n is None else f"{n / GiB:.2f}"


def _bytes(n: float) -> str:
    for unit, size in (("GiB", GiB), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def _tflops(peak: float) -> str:
    return f"{peak / 1e12:.0f} TFLOP/s"


def _estimate(r: StepReport) -> str:
    # A zero step time (no FLOPs, no traffic) leaves tokens/s and MFU unset.
    if r.est_step_s is None or r.est_tokens_per_s is None or r.est_mfu is None:
        return "-"
    return (
        f"{r.est_step_s:.2f} s/step ({r.bound}-bound), {r.est_tokens_per_s:,.0f} tokens/s, MFU {100 * r.est_mfu:.1f}%"
    )


def _collectives(r: StepReport) -> list[str]:
    return [f"{c.scope.upper()} {c.kind} x{c.count:,} = {_bytes(c.bytes)}" for c in r.collectives]


def _ms(seconds: float | None) -> str:
    return "? ms (no published DCN bandwidth)" if seconds is None else f"{1e3 * seconds:.3g} ms"


def _cross_slice(r: StepReport) -> list[str]:
    """What crosses slices: the gradients' all-reduces in one line, then every other transfer."""
    if r.slices < 2 or not r.fits:
        return []
    t = r.dcn_transfers()
    g = t["gradient_all_reduce"]
    lines = [
        f"across slices (DCN): gradient all-reduce x{g['count']:,} = {_bytes(g['bytes'])}, "
        f"{_ms(g['seconds_per_step'])} per step; "
        + (f"{len(t['other'])} other transfer(s):" if t["other"] else "nothing else")
    ]
    for o in t["other"]:
        lines.append(
            f"  {o['kind']} {o['collective']} {o['shape']} x{o['runs_per_step']:,} = {_bytes(o['bytes_per_step'])}, "
            f"{_ms(o['seconds_per_step'])}: {', '.join(o['sources']) or '(no op_name)'}"
        )
    return lines


def as_text(reports: Sequence[StepReport]) -> str:
    lines: list[str] = []
    for r in reports:
        verdict = "fits" if r.fits else "DOES NOT FIT"
        if r.fits and r.headroom_bytes is not None and r.headroom_bytes < 0:
            verdict = "compiled, but over the limit as memory_analysis counts it"
        lines.append(
            f"{r.step} ({r.function}) on {r.topology}: {r.chips} chips in {r.slices} slice(s), "
            f"mesh {r.mesh}, remat {r.remat}, attention {r.attention}"
        )
        lines.append(
            f"  HBM per chip: {_gib(r.hbm_bytes_per_chip)} of {_gib(r.hbm_capacity_bytes)} GiB, {verdict}"
            + (f" (headroom {_gib(r.headroom_bytes)} GiB)" if r.fits else "")
        )
        if r.hbm:
            lines.append(
                f"    arguments {_gib(r.hbm['argument'])}, temporaries {_gib(r.hbm['temp'])}, outputs "
                f"{_gib(r.hbm['output'])}, aliased (donated) {_gib(r.hbm['alias'])} GiB"
            )
        if r.error:
            lines.append(f"    compiler: {r.error}")
        lines.append(
            f"  FLOPs per step: {r.flops_per_step:.4g} model, {r.hardware_flops_per_step:.4g} with remat "
            f"recompute; {r.tokens_per_step:,} tokens"
        )
        if r.host_offload_bytes:
            need = r.host_bytes_per_s_needed
            lines.append(
                f"  host offload: {_gib(r.host_offload_bytes)} GiB per chip per step, out and back"
                + (f" ({need / 1e9:.1f} GB/s per chip hides it under the step)" if need else "")
            )
        lines.append(f"  estimate (roofline, chip peak {_tflops(r.chip_peak_flops)}): {_estimate(r)}")
        if r.compiler_optimal_s is not None:
            lines.append(f"  compiler's optimal_seconds: {r.compiler_optimal_s:.4g} s (counts each loop body once)")
        for c in _collectives(r):
            lines.append(f"  {c}")
        lines += [f"  {line}" for line in _cross_slice(r)]
        lines.append(f"  compiled in {r.compile_s:.1f} s ({r.compile_cpu_s:.1f} CPU s)")
    for step, group in _comparisons(reports).items():
        lines.append("")
        lines.append(f"remat policies for {step} on {group[0].topology} ({_CHOICE_RULE}):")
        lines.append(
            f"  {'policy':18s} {'HBM GiB/chip':>13s} {'headroom':>9s} {'FLOPs/step':>11s} {'recompute':>10s} "
            f"{'MFU ceiling':>11s} {'host GiB':>9s}"
        )
        for r in group:
            lines.append(
                f"  {r.remat:18s} {_gib(r.hbm_bytes_per_chip):>13s} {_headroom(r):>9s} "
                f"{r.hardware_flops_per_step:11.4g} {_recompute(r):>10s} {_mfu(r):>11s} "
                f"{_gib(r.host_offload_bytes):>9s}{'  <- chosen' if r.chosen else ''}"
            )
        if not any(r.chosen for r in group):
            lines.append("  none chosen: no policy fits with the headroom")
    return "\n".join(lines)


_CHOICE_RULE = "chosen: the highest MFU ceiling that fits with 2 GiB of headroom per chip, without host offload"


def _comparisons(reports: Sequence[StepReport]) -> dict[str, list[StepReport]]:
    """Steps compiled under more than one remat policy (`--remat`), their reports in order."""
    groups: dict[str, list[StepReport]] = {}
    for r in reports:
        groups.setdefault(r.step, []).append(r)
    return {
        step: group
        for step, group in groups.items()
        if len({r.remat for r in group}) > 1 or any(r.chosen for r in group)
    }


def _headroom(r: StepReport) -> str:
    return _gib(r.headroom_bytes) if r.fits else "no fit"


def _recompute(r: StepReport) -> str:
    return f"+{100 * (r.hardware_flops_per_step / r.flops_per_step - 1):.1f}%" if r.flops_per_step else "-"


def _mfu(r: StepReport) -> str:
    return f"{100 * r.est_mfu:.1f}%" if r.est_mfu else "-"


def as_markdown(reports: Sequence[StepReport]) -> str:
    lines = [
        "| step | topology | chips | HBM GiB/chip (limit) | fits | headroom GiB | model FLOPs/step | "
        "est. tokens/s | est. MFU | ICI / step | DCN / step | compile s |",
        "|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in reports:
        net = {"ici": 0, "dcn": 0}
        for c in r.collectives:
            net[c.scope] += c.bytes
        lines.append(
            f"| {r.step} | {r.topology} | {r.chips} | {_gib(r.hbm_bytes_per_chip)} ({_gib(r.hbm_capacity_bytes)}) | "
            f"{'yes' if r.fits else '**no**'} | {_gib(r.headroom_bytes) if r.fits else '-'} | "
            f"{r.flops_per_step:.3g} | {f'{r.est_tokens_per_s:,.0f}' if r.est_tokens_per_s else '-'} | "
            f"{f'{100 * r.est_mfu:.1f}%' if r.est_mfu else '-'} | {_bytes(net['ici'])} | {_bytes(net['dcn'])} | "
            f"{r.compile_s:.1f} |"
        )
    lines.append("")
    lines.append(
        "Estimates are a roofline (hardware FLOPs incl. remat at the chip's bf16 peak, collective bytes at "
        "the interconnect bandwidth, whichever is slowest): an upper bound on throughput."
    )
    for r in reports:
        if r.collectives:
            lines.append(f"- `{r.step}` collectives: " + "; ".join(_collectives(r)))
        cross = _cross_slice(r)
        if cross:
            lines.append(f"- `{r.step}` {cross[0]}")
            lines += [f"  - `{line.strip()}`" for line in cross[1:]]
    for step, group in _comparisons(reports).items():
        lines += [
            "",
            f"Remat policies for `{step}` on {group[0].topology} ({_CHOICE_RULE}):",
            "",
            "| policy | HBM GiB/chip (limit) | fits | headroom GiB | FLOPs/step incl. recompute | recompute | "
            "MFU ceiling | host offload GiB/chip | chosen |",
            "|---|---:|---|---:|---:|---:|---:|---:|---|",
        ]
        for r in group:
            lines.append(
                f"| {r.remat} | {_gib(r.hbm_bytes_per_chip)} ({_gib(r.hbm_capacity_bytes)}) | "
                f"{'yes' if r.fits else '**no**'} | {_gib(r.headroom_bytes) if r.fits else '-'} | "
                f"{r.hardware_flops_per_step:.4g} | {_recompute(r)} | {_mfu(r)} | "
                f"{_gib(r.host_offload_bytes) if r.host_offload_bytes else '-'} | "
                f"{'**yes**' if r.chosen else ''} |"
            )
    return "\n".join(lines)


def as_json(reports: Sequence[StepReport]) -> str:
    out: dict = {"steps": [r.as_dict() for r in reports]}
    comparisons = _comparisons(reports)
    if comparisons:  # step -> the chosen policy (None: none fits with the headroom)
        out["remat_choice"] = {
            step: next((r.remat for r in group if r.chosen), None) for step, group in comparisons.items()
        }
    return json.dumps(out, indent=1)


def render(reports: Sequence[StepReport], fmt: str) -> str:
    return {"text": as_text, "markdown": as_markdown, "json": as_json}[fmt](reports)


__all__ = ["FORMATS", "as_json", "as_markdown", "as_text", "render"]
