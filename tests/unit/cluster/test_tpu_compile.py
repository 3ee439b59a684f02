"""`marin-lab compile`: the trainer's own train step compiled for TPU topologies by libtpu, on CPU.

Small targets only (v5e:2x2, two slices of it, a 2-layer nano model): each compile takes seconds.
The full 8B recipe is a command and a benchmark (docs/benchmarks.md), not a test.
"""

from __future__ import annotations

import dataclasses
import json
import textwrap

import pytest

from experiments.models import lab_nano
from marin_lab.cli import main
from marin_lab.cluster import tpu_topology
from marin_lab.cluster.compile_command import compile_experiment
from marin_lab.cluster.compile_report import render
from marin_lab.cluster.hlo_collectives import collective_ops, parse_collectives
from marin_lab.cluster.tpu_compile import (
    HEADROOM_BYTES,
    StepReport,
    carries_gradients,
    choose_remat,
    compile_training_step,
    remat_extra_flops,
)
from marin_lab.cluster.tpu_topology import parse_topology
from marin_lab.training import DataConfig, MeshConfig, TrainingError, TrainLmConfig

TINY = dataclasses.replace(lab_nano, num_layers=2, vocab_size=512, max_seq_len=4096)


def _config(**overrides) -> TrainLmConfig:
    fields = dict(
        output_path="unused",
        data=DataConfig(caches={}),
        model=TINY,
        batch_size=8,
        seq_len=128,
        gradient_checkpointing=True,
        mesh=MeshConfig(fsdp=-1),
    )
    return TrainLmConfig(**{**fields, **overrides})


EXPERIMENT = textwrap.dedent("""
    import dataclasses
    from experiments.models import lab_nano
    from marin_lab.cluster.resources import TpuResources
    from marin_lab.execution import ExecutorStep, executor_main, this_output_path
    from marin_lab.main.train_lm import train_lm
    from marin_lab.training import DataConfig, MeshConfig, TrainLmConfig

    model = dataclasses.replace(lab_nano, num_layers=2, vocab_size=512)
    def train(name, resources, **kw):
        fields = dict(batch_size=8, seq_len=128, gradient_checkpointing=True, mesh=MeshConfig(fsdp=-1))
        config = TrainLmConfig(output_path=this_output_path(), data=DataConfig(caches={}), model=model,
                               **{**fields, **kw})
        return ExecutorStep(name=name, fn=train_lm, config=config, resources=resources)

    steps = [train("checkpoints/tiny", TpuResources(tpu="v5e-4")),
             train("checkpoints/on-cpu", {"num_cpus": 1}),
             train("checkpoints/odd-batch", TpuResources(tpu="v5e-4"), batch_size=6)]
    if __name__ == "__main__":
        executor_main(steps=steps)
""")


@pytest.fixture
def experiment(tmp_path, monkeypatch):
    path = tmp_path / "tiny_tpu.py"
    path.write_text(EXPERIMENT)
    monkeypatch.setenv("MARIN_PREFIX", str(tmp_path / "store"))
    return str(path)


@pytest.mark.slow
def test_compile_json_reports_the_declared_topology(experiment, capsys):
    assert main(["compile", experiment, "--step", "tiny", "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    (step,) = report["steps"]
    assert step["step"] == "checkpoints/tiny" and step["function"] == "train_lm"
    assert (step["topology"], step["slices"], step["chips"]) == ("v5e-4", 1, 4)
    assert step["mesh"] == {"replica": 1, "data": 1, "fsdp": 4, "model": 1}
    assert step["fits"] is True
    assert step["hbm_capacity_bytes"] == int(15.75 * 2**30)
    hbm = step["hbm"]
    assert step["hbm_bytes_per_chip"] == hbm["argument"] + hbm["output"] - hbm["alias"] + hbm["temp"] > 0
    # FLOPs from the model (6N + attention per token), not the compiler's loop-bodies-once count.
    assert step["flops_per_step"] == pytest.approx(TINY.flops_per_token(128) * 8 * 128)
    assert step["hardware_flops_per_step"] > step["flops_per_step"]  # full remat recomputes the forward
    assert step["compile_s"] > 0 and 0 < step["est_mfu"] <= 1
    kinds = {(c["kind"], c["scope"]) for c in step["collectives"]}
    assert ("all-gather", "ici") in kinds and all(c["scope"] == "ici" for c in step["collectives"])
    for c in step["collectives"]:
        assert set(c) == {"kind", "scope", "count", "bytes"} and c["count"] > 0 and c["bytes"] > 0
    # Parameters are gathered per layer inside the scan: counted once per layer (2), not once.
    gathers = next(c for c in step["collectives"] if c["kind"] == "all-gather")
    assert gathers["count"] >= 2 * 7


@pytest.mark.slow
def test_fsdp_over_two_slices_gathers_parameters_across_the_dcn():
    """Today's mesh has no axis over slices: fsdp=-1 spans both, so parameter all-gathers cross the
    data-centre network inside every layer (the contrast for a replica axis over slices)."""
    report = compile_training_step("two-slices", "train_lm", _config(), parse_topology("v5e:2x2", slices=2))
    assert (report.slices, report.chips, report.fits) == (2, 8, True)
    dcn = {c.kind: c for c in report.collectives if c.scope == "dcn"}
    assert "all-gather" in dcn and dcn["all-gather"].count >= 2 * 7
    # ... inside the layer loop: such a transfer runs once per layer (2 here), every step.
    assert any(op.kind == "all-gather" and op.runs_per_step == TINY.num_layers for op in report.dcn_ops)
    assert report.as_dict()["network_bytes"]["dcn"] > 0
    table = render([report], "markdown")
    assert "| two-slices | v5e:2x2 x2 | 8 |" in table and "DCN all-gather x" in table


FINETUNE = textwrap.dedent("""
    import dataclasses
    from experiments.models import lab_nano
    from marin_lab.cluster.resources import TpuResources
    from marin_lab.execution import ExecutorStep, executor_main, this_output_path
    from marin_lab.peft.lora import LoraConfig
    from marin_lab.training import DataConfig
    from marin_lab.training.finetune import FinetuneConfig, finetune_lm

    model = dataclasses.replace(lab_nano, num_layers=2, vocab_size=512, max_seq_len=4096)
    # 32 sequences of 4096 per chip without remat: fp32 attention scores alone are ~8 GiB a layer.
    config = FinetuneConfig(output_path=this_output_path(), data=DataConfig(caches={}), base="never-read",
                            mode="lora", lora=LoraConfig(rank=8), model=model, batch_size=128, seq_len=4096,
                            gradient_checkpointing=False)
    step = ExecutorStep(name="checkpoints/too-big-lora", fn=finetune_lm, config=config,
                        resources=TpuResources(tpu="v5e-4"))
    if __name__ == "__main__":
        executor_main(steps=[step])
""")


@pytest.mark.slow
def test_a_replica_axis_over_slices_sends_only_gradients_across_the_dcn():
    """mesh.slices=2: parameters and optimizer state are sharded inside each slice, so no parameter
    all-gather or reduce-scatter crosses slices; the gradients do, once per step (outside the loops)."""
    two_slices = parse_topology("v5e:2x2", slices=2)
    report = compile_training_step("replica", "train_lm", _config(mesh=MeshConfig(fsdp=-1, slices=2)), two_slices)
    assert report.mesh == {"replica": 2, "data": 1, "fsdp": 4, "model": 1} and report.fits
    assert {op.kind for op in report.dcn_ops} == {"all-reduce"}
    assert all(op.runs_per_step == 1 for op in report.dcn_ops)
    # Inside a slice the parameters are still gathered per layer, as on one slice.
    ici = {c.kind: c for c in report.collectives if c.scope == "ici"}
    assert ici["all-gather"].count >= 2 * 7
    with pytest.raises(TrainingError, match=r"field mesh.slices=2 but topology v5e-4 has 1 slice"):
        compile_training_step("x", "train_lm", _config(mesh=MeshConfig(fsdp=-1, slices=2)), parse_topology("v5e-4"))


# What may cross slices besides the gradients, by op_name (train_step's named scopes): scalar
# reductions over the whole batch, the batch checksum and the clipping norm (its partial sums of the
# accumulated gradients, which the compiler splits over the slices too).
EXPLAINED_CROSS_SLICE = ("jit(step)/batch_checksum/", "jit(step)/optimizer/", "/accumulate/")


@pytest.mark.slow
def test_microbatches_over_two_slices_send_only_gradients_across_the_dcn():
    """Regression: Tootsie's kestrel (2 slices, 2 microbatches, save_mlp_in_gate, splash, chunked loss)
    sent all-gathers and one-to-one transfers of each microbatch's tokens, residuals and loss across
    the slices, since microbatch k was rows k*B/m... and lived on slice k. Every cross-slice transfer
    must be the gradients' all-reduce or one EXPLAINED_CROSS_SLICE names."""
    config = _config(
        mesh=MeshConfig(fsdp=-1, slices=2),
        batch_size=16,
        seq_len=1024,  # past the loss chunk (512): the chunked loss's gathers were among the transfers
        microbatches=2,
        gradient_checkpointing="save_mlp_in_gate",
        attention_impl="splash",
    )
    report = compile_training_step("kestrel-like", "train_lm", config, parse_topology("v5e:2x2", slices=2))
    assert report.fits and report.mesh == {"replica": 2, "data": 1, "fsdp": 4, "model": 1}
    assert {op.kind for op in report.dcn_ops} == {"all-reduce"}, [
        (op.kind, op.shape, op.sources) for op in report.dcn_ops if op.kind != "all-reduce"
    ]
    gradients = [op for op in report.dcn_ops if carries_gradients(op)]
    # Reduced inside the microbatch loop: once per microbatch.
    assert gradients and all(op.runs_per_step == 2 for op in gradients)
    for op in report.cross_slice_other:
        explained = [any(mark in s for mark in EXPLAINED_CROSS_SLICE) for s in op.sources]
        assert op.sources and all(explained), (op.collective, op.shape, op.sources)
        assert op.bytes <= 8 * 2**10 and op.runs_per_step == 1
    transfers = report.as_dict()["dcn_transfers"]
    assert transfers["gradient_all_reduce"]["bytes"] == sum(op.bytes * op.runs_per_step for op in gradients)
    assert [o["sources"] for o in transfers["other"]] == [list(op.sources) for op in report.cross_slice_other]
    assert all(o["seconds_per_step"] == o["bytes_per_step"] / report.dcn_bytes_per_s for o in transfers["other"])
    assert "across slices (DCN): gradient all-reduce x" in render([report], "text")


@pytest.mark.slow
def test_a_step_that_does_not_fit_exits_1_with_one_line(tmp_path, monkeypatch, capsys):
    path = tmp_path / "big.py"
    path.write_text(FINETUNE)
    monkeypatch.setenv("MARIN_PREFIX", str(tmp_path / "store"))
    assert main(["compile", str(path), "--format", "json"]) == 1
    captured = capsys.readouterr()
    (step,) = json.loads(captured.out)["steps"]
    assert step["function"] == "finetune_lm" and step["fits"] is False
    assert step["collectives"] == [] and step["est_mfu"] is None
    assert step["hbm_bytes_per_chip"] > step["hbm_capacity_bytes"]
    lines = [line for line in captured.err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1
    assert "checkpoints/too-big-lora" in lines[0] and "does not fit v5e-4" in lines[0] and "15.75 GiB" in lines[0]
    assert "gradient_checkpointing" in lines[0]


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--step", "on-cpu"], "field resources declares no TPU"),
        (["--step", "odd-batch"], "step 'checkpoints/odd-batch': field batch_size"),
        (["--step", "tiny", "--topology", "v5e-3"], "unknown topology 'v5e-3'; known: v4-8"),
        (["--step", "tiny", "--topology", "v9-8"], "unknown topology 'v9-8'"),
    ],
)
def test_bad_input_is_one_line_naming_the_step_and_field(experiment, capsys, args, expected):
    assert main(["compile", experiment, *args]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expected in err[0], err


def test_mesh_and_attention_that_the_topology_cannot_take():
    v5e4 = parse_topology("v5e-4")
    with pytest.raises(
        TrainingError,
        match=r"step 'x': field mesh: the fixed axes multiply to 3, "
        "which does not divide the 4 devices",
    ):
        compile_training_step("x", "train_lm", _config(mesh=MeshConfig(data=3, fsdp=-1)), v5e4)
    with pytest.raises(TrainingError, match=r"step 'x': field attention_impl='cudnn' is not available on tpu"):
        compile_training_step("x", "train_lm", _config(attention_impl="cudnn"), v5e4)


def test_without_libtpu_the_command_says_how_to_install_it(experiment, capsys, monkeypatch):
    real = tpu_topology.importlib.util.find_spec
    monkeypatch.setattr(tpu_topology.importlib.util, "find_spec", lambda name: None if name == "libtpu" else real(name))
    assert main(["compile", experiment]) == 1
    assert "pip install -e '.[tpu]'" in capsys.readouterr().err


def test_topology_names():
    assert parse_topology("v5e-256x2").compiler_name == "v5e:16x16"
    assert (parse_topology("v5e-256x2").slices, parse_topology("v5e-256x2").chips) == (2, 512)
    assert parse_topology("v4-2048").compiler_name == "v4:8x8x16" and parse_topology("v4-2048").chips == 1024
    assert parse_topology("v5e-4").compiler_name == "v5e:2x2"
    assert parse_topology("v5e:2x2", slices=2).chips == 8
    with pytest.raises(TrainingError, match="2-D grid"):
        parse_topology("v5e:2x2x2")
    # v4 is described with the megacore chip config: one device per chip, not per core.
    assert len(parse_topology("v4-16").devices()) == 8


HLO = textwrap.dedent("""
    HloModule m

    %body (p: (s32[], f32[8])) -> (s32[], f32[8]) {
      %p = (s32[], f32[8]) parameter(0)
      %ag = bf16[4,256]{1,0} all-gather(%x), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}
      %rs = f32[64]{0} reduce-scatter(%y), channel_id=2, replica_groups={{0,1,2,3}}, dimensions={0}, to_apply=%add
      %send.1 = (bf16[2,16]{1,0}, u32[], token[]) send(%z, %tok), channel_id=3, is_host_transfer=true, frontend_attributes={_xla_megascale_transfer_type="ALL_GATHER"}
      %send-done.1 = token[] send-done(%send.1), channel_id=3
      ROOT %t = (s32[], f32[8]) tuple(%i, %v)
    }

    %cond (p: (s32[], f32[8])) -> pred[] {
      %p = (s32[], f32[8]) parameter(0)
      %limit = s32[] constant(32)
      %i = s32[] get-tuple-element(%p), index=0
      ROOT %lt = pred[] compare(%i, %limit), direction=LT
    }

    ENTRY %main (a: f32[8]) -> f32[8] {
      %zero = s32[] constant(0)
      %init = (s32[], f32[8]) tuple(%zero, %a)
      %w = (s32[], f32[8]) while(%init), condition=%cond, body=%body
      %ar = f32[1024]{0} all-reduce(%g), channel_id=4, replica_groups={{0,1}}, to_apply=%add
      %send.2 = (f32[1024]{0}, u32[], token[]) send(%g, %tok), is_host_transfer=true, frontend_attributes={_xla_megascale_transfer_type="ALL_REDUCE"}
      ROOT %r = f32[8] get-tuple-element(%w), index=1
    }
""")  # noqa: E501 (HLO lines as XLA prints them)


def test_collectives_in_a_loop_count_once_per_iteration():
    got = {(c.kind, c.scope): (c.count, c.bytes) for c in parse_collectives(HLO)}
    assert got == {
        ("all-gather", "ici"): (32, 32 * 4 * 256 * 2),
        ("reduce-scatter", "ici"): (32, 32 * 64 * 4 * 4),  # the full input: result x group of 4
        ("all-reduce", "ici"): (1, 1024 * 4),
        ("all-gather", "dcn"): (32, 32 * 2 * 16 * 2),
        ("all-reduce", "dcn"): (1, 1024 * 4),
    }


CROSS_SLICE_HLO = textwrap.dedent("""
    HloModule m

    %layers (p: (s32[], bf16[4,64])) -> (s32[], bf16[4,64]) {
      %p = (s32[], bf16[4,64]) parameter(0)
      %i = s32[] get-tuple-element(%p), index=0, metadata={op_name="jit(step)/while/body/add"}
      %stack = bf16[4,64]{1,0} get-tuple-element(%p), index=1
      %layer = bf16[1,64]{1,0} fusion(%stack, %i), kind=kLoop, calls=%ds
      %tok = token[] after-all(%i)
      %send.3 = (bf16[1,64]{1,0}, u32[], token[]) send(%layer, %tok), channel_id=3, is_host_transfer=true, frontend_attributes={_xla_host_transfer_rendezvous="all-reduce.9_0",_xla_megascale_transfer_type="ALL_REDUCE"}
      %next = s32[] add(%i, %i), metadata={op_name="jit(step)/while/body/add"}
      %grads = bf16[4,64]{1,0} fusion(%stack, %i), kind=kLoop, calls=%dus, metadata={op_name="jit(step)/transpose(jvp())/while/body/dynamic_update_slice"}
      ROOT %t = (s32[], bf16[4,64]) tuple(%next, %grads)
    }

    ENTRY %main (a: bf16[64]) -> bf16[64] {
      %a = bf16[64]{0} parameter(0)
      %dot.1 = bf16[64]{0} fusion(%a), kind=kLoop, calls=%f, metadata={op_name="jit(step)/transpose(jvp())/dot_general"}
      %bitcast.1 = bf16[8,8]{1,0} bitcast(%dot.1)
      %tok = token[] after-all(%a)
      %send.1 = (bf16[8,8]{1,0}, u32[], token[]) send(%bitcast.1, %tok), channel_id=1, is_host_transfer=true, frontend_attributes={_xla_host_transfer_rendezvous="all-reduce.7_0",_xla_megascale_transfer_type="ALL_REDUCE"}
      %embed.1 = bf16[4,64]{1,0} fusion(%a), kind=kLoop, calls=%g, metadata={op_name="jit(step)/while/body/add"}
      %send.2 = (bf16[4,64]{1,0}, u32[], token[]) send(%embed.1, %tok), channel_id=2, is_host_transfer=true, frontend_attributes={_xla_host_transfer_rendezvous="all-gather.3_0",_xla_megascale_transfer_type="ALL_GATHER"}
      %w = (s32[], bf16[4,64]) while(%init), condition=%cond, body=%layers
      ROOT %r = bf16[64]{0} copy(%a)
    }
""")  # noqa: E501 (HLO lines as XLA prints them)


def test_each_cross_slice_transfer_is_named_by_what_it_carries():
    ops = {op.collective: op for op in collective_ops(CROSS_SLICE_HLO)}
    grad, gather = ops["all-reduce.7"], ops["all-gather.3"]
    # A slice of a loop-carried stack: named by what the body's previous iteration wrote there,
    # not by the loop counter that indexes it.
    assert ops["all-reduce.9"].sources == ("jit(step)/transpose(jvp())/while/body/dynamic_update_slice",)
    # The payload's op_name, found past the bitcast (and never through the token).
    assert (grad.kind, grad.shape, grad.bytes, grad.sources) == (
        "all-reduce",
        "bf16[8,8]",
        128,
        ("jit(step)/transpose(jvp())/dot_general",),
    )
    assert (gather.kind, gather.shape, gather.sources) == ("all-gather", "bf16[4,64]", ("jit(step)/while/body/add",))
    assert carries_gradients(grad) and not carries_gradients(gather)
    report = _report(slices=2, dcn_ops=[grad, gather], dcn_bytes_per_s=1e9)
    assert report.cross_slice_other == [gather]
    (other,) = report.as_dict()["dcn_transfers"]["other"]
    assert other == {
        "kind": "all-gather",
        "collective": "all-gather.3",
        "shape": "bf16[4,64]",
        "bytes": 512,
        "runs_per_step": 1,
        "bytes_per_step": 512,
        "seconds_per_step": 512 / 1e9,
        "sources": ["jit(step)/while/body/add"],
    }
    text = render([report], "text")
    assert "gradient all-reduce x1 = 128 B" in text and "1 other transfer(s):" in text
    assert "all-gather all-gather.3 bf16[4,64] x1 = 512 B, 0.000512 ms: jit(step)/while/body/add" in text


def _report(**overrides) -> StepReport:
    fields = dict(
        step="s",
        function="train_lm",
        topology="v5e-8",
        slices=1,
        chips=8,
        mesh={"fsdp": 8},
        fits=True,
        hbm_bytes_per_chip=1 << 30,
        hbm_capacity_bytes=16 << 30,
        hbm={},
        flops_per_step=0.0,
        hardware_flops_per_step=0.0,
        tokens_per_step=0,
        chip_peak_flops=1.97e14,
        est_step_s=0.0,
        est_tokens_per_s=None,
        est_mfu=None,
        bound="compute",
        compiler_optimal_s=None,
        compile_s=1.0,
        compile_cpu_s=1.0,
        collectives=[],
        remat="none",
        attention="xla",
    )
    return StepReport(**{**fields, **overrides})


def test_a_zero_step_time_is_reported_without_an_estimate():
    # est_step_s 0.0 (no FLOPs, no traffic) leaves tokens/s and MFU None: the report shows "-".
    assert "estimate (roofline, chip peak 197 TFLOP/s): -" in render([_report()], "text")


def test_an_experiment_that_raises_while_loaded_is_one_line(tmp_path, capsys):
    path = tmp_path / "broken.py"
    path.write_text("import os\n\nraise RuntimeError('no such dataset: foo')\n")
    assert main(["compile", str(path)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "broken.py at line 3" in err[0] and "RuntimeError: no such dataset: foo" in err[0], err


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--step", "("], "--step '(' is not a regular expression"),
        (["--topology", "v5e:2x2", "--slices", "-2"], "--slices -2: give a number of slices of at least 1"),
        (["--topology", "v5e:2x2", "--slices", "0"], "--slices 0: give a number of slices of at least 1"),
    ],
)
def test_nonsense_arguments_are_refused_in_one_line(experiment, capsys, args, expected):
    assert main(["compile", experiment, *args]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expected in err[0], err
    with pytest.raises(TrainingError, match="slices must be at least 1, got -2"):
        parse_topology("v5e:2x2", slices=-2)


def test_script_arguments_after_double_dash_reach_the_experiment(tmp_path, capsys, monkeypatch):
    path = tmp_path / "named.py"
    path.write_text(
        EXPERIMENT.replace("steps = [", "import sys\nsuffix = sys.argv.pop(1)\nsteps = [").replace(
            '"checkpoints/on-cpu"', 'f"checkpoints/on-cpu-{suffix}"'
        )
    )
    monkeypatch.setenv("MARIN_PREFIX", str(tmp_path / "store"))
    assert main(["compile", str(path), "--step", "on-cpu", "--", "given"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "step 'checkpoints/on-cpu-given': field resources declares no TPU" in err[0], err


@pytest.mark.slow
def test_remat_comparison_compiles_each_policy_and_chooses_the_fastest_that_fits(experiment, capsys):
    """`--remat full,save_mlp` on the nano model for v5e-4: one report per policy, FLOPs charged
    with each policy's recompute, and the choice rule (fits, 2 GiB free, no host offload, best MFU)."""
    reports = compile_experiment(experiment, step="tiny", remat="full,save_mlp")
    assert [r.remat for r in reports] == ["full", "save_mlp"] and all(r.fits for r in reports)
    full, save = reports
    assert full.flops_per_step == save.flops_per_step
    for r in reports:
        assert r.hardware_flops_per_step - r.flops_per_step == pytest.approx(
            remat_extra_flops(TINY, r.remat, 8 * 128, 128, "einsum")
        )
        assert r.headroom_bytes is not None and r.headroom_bytes > HEADROOM_BYTES
    assert save.hardware_flops_per_step < full.hardware_flops_per_step
    (chosen,) = [r for r in reports if r.chosen]
    assert chosen is max(reports, key=lambda r: (r.est_mfu, -r.hbm_bytes_per_chip))
    data = json.loads(render(reports, "json"))
    assert data["remat_choice"] == {"checkpoints/tiny": chosen.remat}
    assert [s["chosen"] for s in data["steps"]] == [r is chosen for r in reports]
    text = render(reports, "text")
    assert "remat policies for checkpoints/tiny on v5e-4" in text
    assert f"{chosen.remat}" in next(line for line in text.splitlines() if line.endswith("<- chosen"))
    assert "| save_mlp |" in render(reports, "markdown")
    # The rule, on the same reports: too little headroom, host offload or no fit is never chosen.
    tight = dataclasses.replace(
        save, chosen=False, hbm_bytes_per_chip=save.hbm_capacity_bytes - HEADROOM_BYTES + 1, est_mfu=0.99
    )
    offload = dataclasses.replace(save, chosen=False, host_offload_bytes=1, est_mfu=0.99)
    no_fit = dataclasses.replace(save, chosen=False, fits=False, est_mfu=None, hbm_bytes_per_chip=None)
    plain = dataclasses.replace(full, chosen=False)
    assert choose_remat([plain, tight, offload, no_fit]) is plain
    assert choose_remat([tight, offload, no_fit]) is None
    over = dataclasses.replace(tight, hbm_bytes_per_chip=save.hbm_capacity_bytes + 2**28)
    assert "compiled, but over the limit as memory_analysis counts it" in render([over], "text")
    assert choose_remat([over]) is None
    same = dataclasses.replace(plain, hbm_bytes_per_chip=plain.hbm_bytes_per_chip - 1)
    assert choose_remat([plain, same]) is same  # equal ceilings: the smaller HBM


def test_remat_flag_bad_policy_is_one_line(experiment, capsys):
    assert main(["compile", experiment, "--step", "tiny", "--remat", "full,save_everything"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--remat 'full,save_everything': 'save_everything' is not a remat policy" in err[0]
    assert "save_mlp_gate" in err[0]
