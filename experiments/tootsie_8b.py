"""Tootsie 8B: a multi-phase 8B pretraining run in the spirit of Marin's "Tootsie Roll" run.

Question: how far does a Llama-3.1-8B-shaped model get on open data when the recipe adapts
phase by phase (hardware, batch, learning rate, mixture) instead of being fixed up front?
Baseline: Marin's first-generation 8B (phases Kestrel -> Ocelot -> Jellyfish ...).

Phases (each a `train_lm` step that starts from the previous one's last checkpoint, optimizer
state included, so the schedule continues without a re-warmup):

1. kestrel  2x v5e-256 (multislice). DCLM's 7B "best mix" in proportion to tokens, 1024 x 4096
            tokens per step, lr 1e-3 held hot (DCLM showed such a hot rate is fine), wd 0.05.
            ~2.7T tokens.
2. ocelot   v4-2048. Batch x3 to fill the bigger slice (3072 x 4096 = 12Mi tokens); lr scaled by
            sqrt(3) to 1.7e-3 (square-root rule for Adam). Still hot. To ~3.8T tokens.
3. jellyfish cooldown on v4-2048: lr decays linearly 1.7e-3 -> 1.7e-4 over ~1T tokens while
            FineMath (high-quality math) is folded into the mixture; z-loss on, which Marin's
            retrospective says it should have used from the start.

Every phase: AdamW without weight decay on the input embedding and the norm gains, as Marin's
8B did (a token's embedding row gets a gradient only when the token occurs; decaying it every step
shrinks rare tokens for nothing).

Marin's retrospective (docs/reports/marin-8b-retro.md in marin-community/marin) describes more than
this recipe holds:
- Kestrel's WSD-S schedule (a short decay every 10k, later 20k, steps): not done; the optimizer has
  no cyclic schedule, so kestrel holds the rate constant (the decays served monitoring only).
- Ocelot's EMA of weights (beta 0.995) for evaluation: not done; the trainer keeps no weight EMA.
- Phoenix (reheat, then Nemotron-CC + StarCoder to ~11.1T tokens) and Starling (second cooldown
  with new high-quality sets to ~12.75T), and the "dessert"/deeper-cooldown side runs: not done;
  Nemotron-CC is published through Common Crawl, not as a Hugging Face dataset the download step
  fetches, and Starling's mixture depends on datasets built in Marin's own pipeline.
- Llama-2 RoPE settings in early kestrel (a mistake the retrospective owns): not reproduced; the
  recipe uses Llama-3 RoPE (theta 500k) throughout.

    python experiments/tootsie_8b.py --dry_run true   # the plan: paths, tokens, FLOPs, TPU-hours
    marin-lab compile experiments/tootsie_8b.py       # each phase compiled for its TPUs: memory, collectives
    marin-lab compile experiments/tootsie_8b.py --step ocelot --remat full,save_mlp_in_gate   # remat policies

A real run needs a TPU cluster (`--backend ray`) and Hugging Face access for the downloads.
"""

from __future__ import annotations

from typing import Any, cast

from experiments.defaults import default_download, default_eval, default_tokenize, default_train
from experiments.llama import llama3_tokenizer_vocab_size, llama_8b
from experiments.models import with_vocab
from experiments.simple_train_config import SimpleTrainConfig
from marin_lab.cluster.resources import TpuResources
from marin_lab.evaluation import CORE_TASKS
from marin_lab.execution import executor_main
from marin_lab.training import CheckpointConfig, MeshConfig, OptimizerConfig

SEQ_LEN = 4096  # as in Tootsie; Llama-3.1's 128k context is not needed for pretraining
TOKENIZER = "meta-llama/Llama-3.1-8B"  # the Llama 3 tokenizer (128,256 ids)
# Marin's preset has no vocabulary; giving it the tokenizer's here keeps the plan offline.
MODEL = with_vocab(llama_8b, llama3_tokenizer_vocab_size)

# Pinned dataset revisions: the short commit ids Marin's public experiment files pin for the same
# datasets (FineMath: the full sha used by public finemath-3plus download scripts).
SOURCES: dict[str, dict[str, Any]] = {
    "dclm": dict(hf_dataset="mlfoundations/dclm-baseline-1.0", revision="a3b142c"),
    "starcoder": dict(hf_dataset="bigcode/starcoderdata", revision="9fc30b5"),
    "proofpile": dict(hf_dataset="EleutherAI/proof-pile-2", revision="901a927"),
    "finemath": dict(
        hf_dataset="HuggingFaceTB/finemath",
        revision="e92b25a616738fe95dc186b64dfb19f9c8525594",
        include=("finemath-3plus/*",),
    ),
}

raw = {name: default_download(f"tootsie/{name}", num_workers=32, **spec) for name, spec in SOURCES.items()}
tokenized = {
    name: default_tokenize(
        f"tootsie/{name}-llama3", step, tokenizer=TOKENIZER, validation_fraction=0.0005, num_workers=64
    )
    for name, step in raw.items()
}
pretraining = {k: tokenized[k] for k in ("dclm", "starcoder", "proofpile")}

# Shares of DCLM's 7B mix, proportional to each source's tokens.
DCLM_MIX = {"dclm": 0.926, "starcoder": 0.061, "proofpile": 0.013}
# Cooldown: 30% high-quality math on top of the pretraining mix (cf. micro-annealing results).
COOLDOWN_MIX = {"dclm": 0.65, "starcoder": 0.045, "proofpile": 0.005, "finemath": 0.30}

CHECKPOINTS = CheckpointConfig(save_every_steps=20_000, keep_every_steps=20_000, save_interval_s=1800, keep_last=2)
FSDP = MeshConfig(data=1, fsdp=-1, model=1, param_sharding="fsdp")

# wd 0.05 (DCLM's Table 12); embeddings and norms are not decayed (module docstring).
DECAY: dict[str, Any] = dict(weight_decay=0.05, decay_embeddings=False)

KESTREL_END = 640_000  # 640k x 1024 x 4096 ~= 2.68T tokens
OCELOT_END = KESTREL_END + 87_500  # +87.5k x 3072 x 4096 ~= +1.10T tokens
JELLYFISH_END = OCELOT_END + 80_000  # +80k x 3072 x 4096 ~= +1.01T tokens
# Marin's in-loop evaluation: CORE_TASKS (lm-eval, 100 items each) every 10k steps and at each
# phase's end, as eval/<task>/<metric>; the full sets are scored by the evaluation step at the end.
IN_LOOP: dict[str, Any] = dict(eval_harness_tasks=CORE_TASKS, steps_per_task_eval=10_000, eval_task_limit=100)

# Remat per phase: the policy with the highest MFU ceiling that the TPU compiler fits with at least
# 2 GiB free per chip (`marin-lab compile experiments/tootsie_8b.py --remat all`; docs/benchmarks.md,
# "Compiling for TPUs"). Remat changes memory and speed, never the numerics (tests/unit/training/test_remat.py),
# so it is not part of a step's identity.
REMAT = {
    # 2 x v5e-256 in 2 microbatches (KESTREL_MICROBATCHES): 10.41 of 15.75 GiB per chip, ceiling 87.3%
    # (full: 80.7%). In one batch nothing past 84.2% (save_qkv_mlp_in, 11.77 GiB) fits: save_mlp_gate
    # compiles to 16.00 GiB; in two, save_mlp (93.2%) leaves 1.94 GiB, under the 2 GiB margin.
    "kestrel": "save_mlp_in_gate",
    "v4": "save_mlp_in_gate",  # v4-2048: 21.32 of 30.75 GiB per chip, MFU ceiling 87.3% (full: 80.7%)
}
# Kestrel's 1024 sequences go through each step as 2 microbatches of 512 (one sequence per v5e chip
# at a time): the activations a chip keeps halve, which is what lets save_mlp_in_gate fit; the
# gradients are accumulated and the update is the same step's.
KESTREL_MICROBATCHES = 2


def phase(
    batch: int, end_step: int, optimizer: OptimizerConfig, resources: TpuResources, remat: bool | str, **extra
) -> SimpleTrainConfig:
    return SimpleTrainConfig(
        resources=resources,
        train_batch_size=batch,
        num_train_steps=end_step,
        optimizer=optimizer,
        train_seq_len=SEQ_LEN,
        mesh=FSDP.on_slices(cast(int, resources.slices)),  # each phase asks for a fixed count
        checkpoint=CHECKPOINTS,
        gradient_checkpointing=remat,
        **extra,
    )


kestrel = default_train(
    "tootsie-8b/kestrel",
    pretraining,
    MODEL,
    phase(
        1024,
        KESTREL_END,
        OptimizerConfig(learning_rate=1e-3, schedule="constant", warmup=1000, beta2=0.95, max_grad_norm=1.0, **DECAY),
        TpuResources(tpu="v5e-256", slices=2),
        REMAT["kestrel"],
        microbatches=KESTREL_MICROBATCHES,
    ),
    weights=DCLM_MIX,
    **IN_LOOP,
    description="phase 1: DCLM mix, hot constant lr 1e-3, 4Mi-token batches on 2x v5e-256",
)

ocelot = default_train(
    "tootsie-8b/ocelot",
    pretraining,
    MODEL,
    phase(
        3072,
        OCELOT_END,
        OptimizerConfig(learning_rate=1.7e-3, schedule="constant", warmup=0, schedule_offset=KESTREL_END, **DECAY),
        TpuResources(tpu="v4-2048"),
        REMAT["v4"],
        initialize_from_checkpoint_path=kestrel,
    ),
    weights=DCLM_MIX,
    **IN_LOOP,
    description="phase 2: batch x3 on v4-2048, lr x sqrt(3)",
)

jellyfish = default_train(
    "tootsie-8b/jellyfish",
    tokenized,
    MODEL,
    phase(
        3072,
        JELLYFISH_END,
        OptimizerConfig(
            learning_rate=1.7e-3,
            schedule="linear",
            warmup=0,
            decay=1.0,
            min_lr_ratio=0.1,
            schedule_offset=OCELOT_END,
            **DECAY,
        ),
        TpuResources(tpu="v4-2048"),
        REMAT["v4"],
        initialize_from_checkpoint_path=ocelot,
        z_loss_weight=1e-4,
    ),
    weights=COOLDOWN_MIX,
    **IN_LOOP,
    description="phase 3: cooldown 1.7e-3 -> 1.7e-4 with FineMath folded in, z-loss on",
)

evaluation = default_eval(
    "tootsie-8b/jellyfish",
    jellyfish,
    tokenized,
    seq_len=SEQ_LEN,
    max_sequences=2048,
    tasks=CORE_TASKS,
    resources=TpuResources(tpu="v5e-256"),
)

if __name__ == "__main__":
    executor_main(
        steps=[kestrel, ocelot, jellyfish, evaluation],
        description="Tootsie 8B: three phases (hot DCLM mix, bigger batch, HQ cooldown)",
    )
