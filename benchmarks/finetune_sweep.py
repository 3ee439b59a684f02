"""A small sweep of the fine-tuning quickstart's training settings: held-out answer-loss cut per run.

Question: which adapter settings (learning rate, rank/alpha, steps, dropout, trained embeddings)
bring LoRA and QLoRA within reach of full fine-tuning on the quickstart's section-title task, and
how close does QLoRA stay to LoRA? The task and the score are the experiment's own: the instruction
token cache `experiments/finetune_quickstart.py` builds (made once by one run of it; this script
never rebuilds it) and `finetune_lm`'s before/after masked loss on the validation split.

Inputs are that run's outputs (its `tokenized/manual-sections-*` cache and the pretrained
`checkpoints/quickstart-nano-*`). Each setting is one `finetune_lm` call in this process (no merge,
no HF export); a line of JSON per run goes to `--out`.

    MARIN_PREFIX=/tmp/ftq python experiments/finetune_quickstart.py --backend local   # once
    python benchmarks/finetune_sweep.py --cache /tmp/ftq/tokenized/manual-sections-XXXX \
        --base /tmp/ftq/checkpoints/quickstart-nano-XXXX --only lora-r32-lr1e-2 --out sweep.jsonl
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

from marin_lab.peft import ALL_PROJECTIONS, LoraConfig
from marin_lab.training import CheckpointConfig, DataConfig, OptimizerConfig
from marin_lab.training.finetune import FinetuneConfig, finetune_lm


def _opt(lr: float, warmup: float = 0.05, schedule: str = "cosine") -> OptimizerConfig:
    return OptimizerConfig(learning_rate=lr, warmup=warmup, schedule=schedule, weight_decay=0.0)


def _lora(rank: int, alpha: float | None = None, dropout: float = 0.0, **kw) -> dict:
    """LoraConfig's arguments (built when the run starts)."""
    return dict(rank=rank, alpha=2.0 * rank if alpha is None else alpha, dropout=dropout, **kw)


_ALL_AND_EMBED = (*ALL_PROJECTIONS, "embed_tokens")

# name -> (mode, lora, optimizer, steps). The experiment's settings before this sweep:
# full lr 1e-3; adapters r=8 alpha=16 dropout 0.1 lr 1e-2; cosine, 5% warmup; 200 steps.
SETTINGS = {
    "full-200": ("full", None, _opt(1e-3), 200),
    "lora-r8-base-200": ("lora", _lora(8, 16.0, 0.1), _opt(1e-2), 200),
    "lora-r32-lr1e-2-200": ("lora", _lora(32), _opt(1e-2), 200),
    "lora-r32-lr3e-3-200": ("lora", _lora(32), _opt(3e-3), 200),
    "lora-r32-lr2e-2-200": ("lora", _lora(32), _opt(2e-2), 200),
    "lora-r32-emb-lr1e-2-200": ("lora", _lora(32, modules_to_save=("embed",)), _opt(1e-2), 200),
    "lora-r32-emb-lr3e-3-200": ("lora", _lora(32, modules_to_save=("embed",)), _opt(3e-3), 200),
    "lora-r8-emb-lr3e-3-200": ("lora", _lora(8, modules_to_save=("embed",)), _opt(3e-3), 200),
    "lora-r32-emb-lr2e-3-200": ("lora", _lora(32, modules_to_save=("embed",)), _opt(2e-3), 200),
    "lora-r32-emb-d01-lr3e-3-200": ("lora", _lora(32, dropout=0.1, modules_to_save=("embed",)), _opt(3e-3), 200),
    "qlora-r32-emb-lr3e-3-200": ("qlora", _lora(32, modules_to_save=("embed",)), _opt(3e-3), 200),
    # LoRA on the (tied) embedding too, as peft's target_modules=[..., "embed_tokens"]
    "lora-r32-elora-lr3e-3-200": ("lora", _lora(32, target_modules=_ALL_AND_EMBED), _opt(3e-3), 200),
    "lora-r32-elora-lr1e-3-200": ("lora", _lora(32, target_modules=_ALL_AND_EMBED), _opt(1e-3), 200),
    "lora-r32-elora-lr1e-2-200": ("lora", _lora(32, target_modules=_ALL_AND_EMBED), _opt(1e-2), 200),
    "qlora-r32-elora-lr3e-3-200": ("qlora", _lora(32, target_modules=_ALL_AND_EMBED), _opt(3e-3), 200),
    "full-400": ("full", None, _opt(1e-3), 400),
    "lora-r32-lr1e-2-400": ("lora", _lora(32), _opt(1e-2), 400),
    "lora-r32-emb-400": ("lora", _lora(32, modules_to_save=("embed",)), _opt(3e-3), 400),
    "qlora-r32-emb-400": ("qlora", _lora(32, modules_to_save=("embed",)), _opt(3e-3), 400),
}


def run(name: str, cache: str, base: str, workdir: str) -> dict:
    mode, lora, opt, steps = SETTINGS[name]
    config = FinetuneConfig(
        output_path=f"{workdir}/{name}",
        data=DataConfig(caches={"manual-sections": cache}),
        base=base,
        mode=mode,
        lora=LoraConfig(**lora) if lora else LoraConfig(),
        optimizer=opt,
        num_train_steps=steps,
        batch_size=16,
        seq_len=256,
        compute_dtype="float32",
        eval_max_sequences=None,
        save_merged=False,
        export_hf=False,
        checkpoint=CheckpointConfig(save_every_steps=10**6, keep_last=1),
        log_every=50,
    )
    started = time.perf_counter()
    summary = finetune_lm(config)
    before = summary["eval_loss_before"]["manual-sections"]
    after = summary["eval_loss_after"]["manual-sections"]
    return {
        "name": name,
        "mode": mode,
        "steps": steps,
        "before": before,
        "after": after,
        "cut": 1 - after / before,
        "final_train_loss": summary["final_loss"],
        "trainable_params": summary["trainable_params"],
        "trainable_bytes": summary["bytes"]["trainable"],
        "wall_s": round(time.perf_counter() - started, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", required=True, help="the experiment's tokenized/manual-sections-* folder")
    parser.add_argument("--base", required=True, help="the experiment's checkpoints/quickstart-nano-* folder")
    parser.add_argument("--only", required=True, help=f"comma-separated names of {list(SETTINGS)}")
    parser.add_argument("--out", required=True, help="JSON lines, one per run (appended)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ft-sweep-") as workdir:
        for name in args.only.split(","):
            row = run(name, args.cache, args.base, workdir)
            print(json.dumps(row), flush=True)
            with open(args.out, "a") as f:
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
