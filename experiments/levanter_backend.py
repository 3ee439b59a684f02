"""Training with PyPI's levanter 1.1 in its own locked environment: a step whose code needs packages that
cannot live beside marin_lab's (docs/environments.md), and a peer to compare the native trainer with.

`train_lm_levanter(config)` runs *inside* the Levanter environment (via `run_in_environment`; see
docs/environments.md), so this module imports only the standard library at import time. It trains a
tokenizer (unless one is given), writes the offline stand-ins for the Hugging Face names Levanter
loads, a `TrainLmConfig` YAML, runs `python -m levanter.main.train_lm`, then turns the W&B history
into `metrics.jsonl` and marks finished checkpoints `COMPLETE`, like the native trainer.

Levanter 1.1's llama lacks some of the native model's options (grouped-query attention, tied
embeddings, a RoPE base other than 10000, z-loss); `from_native` refuses them by field name.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from marin_lab.errors import MarinLabError
from marin_lab.ray_niceness import run_workers_at_normal_priority

logger = logging.getLogger(__name__)

LOCK_FILE = str(Path(__file__).resolve().parents[1] / "requirements" / "levanter.lock")
"""Pins every package of the Levanter 1.1 environment."""
LEVANTER_REQUIREMENTS = ("levanter==1.1", "jax", "jaxlib", "fsspec[http]", "async-timeout")
"""Top-level requirements; the lock decides their versions (jax 0.4.20, ...)."""
# Names Levanter's llama converter loads even when it only trains (see module docstring).
HF_REFERENCE_DIRS = ("meta-llama/Llama-2-7b-hf", "hf-internal-testing/llama-tokenizer")
_TOKENIZER_TEXT_BYTES = 20_000_000


# The Levanter runs' defaults, in OptimizerConfig's names (marin_lab/training/optimizer.py).
DEFAULT_OPTIMIZER: dict[str, Any] = {
    "learning_rate": 3e-3,
    "schedule": "cosine",
    "warmup": 0.1,
    "decay": 0.0,
    "min_lr_ratio": 0.1,
    "weight_decay": 0.1,
    "beta1": 0.9,
    "beta2": 0.95,
    "epsilon": 1e-8,
    "max_grad_norm": 1.0,
    "schedule_offset": 0,
}
# OptimizerConfig's schedules as Levanter 1.1's: WSD is its constant schedule plus a linear cooldown.
LEVANTER_SCHEDULES = {"wsd": "constant", "cosine": "cosine", "linear": "linear", "constant": "constant"}


class LevanterBackendError(MarinLabError, ValueError):
    """A Levanter training run cannot start or failed; the message names the field or file."""


@dataclasses.dataclass(frozen=True)
class LevanterTrainConfig:
    """A Levanter 1.1 llama training run (config of the `train_lm_levanter` step)."""

    output_path: str
    """Local directory for checkpoints, metrics.jsonl, train_summary.json, hf/ and Levanter's own files."""
    train_urls: tuple[str, ...]
    """JSONL documents (.jsonl or .jsonl.gz, a `text` field) to train on, e.g. the quality filter's output."""
    validation_urls: tuple[str, ...] = ()
    """JSONL documents for Levanter's eval loss; empty: the first training file is reused."""
    tokenizer: str | None = None
    """A local Hugging Face tokenizer directory; None trains a byte-level BPE on train_urls."""
    tokenizer_vocab_size: int = 1024
    """Vocabulary size of the trained BPE (when tokenizer is None)."""
    seq_len: int = 128
    """Tokens per training sequence (Levanter's model.seq_len)."""
    hidden_dim: int = 64
    """Model width."""
    intermediate_dim: int = 192
    """SwiGLU hidden width."""
    num_layers: int = 2
    """Decoder blocks."""
    num_heads: int = 4
    """Attention heads (key/value heads equal these: Levanter 1.1 has no grouped-query attention)."""
    initializer_range: float = 0.02
    """Std of the normal initialiser."""
    layer_norm_epsilon: float = 1e-5
    """RMSNorm epsilon."""
    gradient_checkpointing: bool = False
    """Recompute activations on the backward pass."""
    optimizer: dict[str, Any] = dataclasses.field(default_factory=lambda: dict(DEFAULT_OPTIMIZER))
    """AdamW and the schedule as `OptimizerConfig`'s fields by name (`dataclasses.asdict` of one, as
    `from_native` passes it; a name left out takes `DEFAULT_OPTIMIZER`'s value). A dict, so this
    module needs no JAX. Levanter 1.1 applies weight decay to every parameter, norms included."""
    num_train_steps: int = 100
    """Steps to train."""
    train_batch_size: int = 8
    """Sequences per step (global)."""
    seed: int = 0
    """Levanter's trainer seed."""
    mixed_precision: str = "f32"
    """A jmp policy: 'f32', or 'p=f32,c=bfloat16' for bf16 compute."""
    steps_per_eval: int = 1000
    """Evaluate every this many steps (and at the end)."""
    max_eval_batches: int | None = 4
    """Cap on eval batches; None evaluates the whole validation set."""
    checkpoint_every_steps: int = 1000
    """Keep a checkpoint at every multiple of this step (Levanter also saves the last step)."""
    checkpoint_interval_minutes: float = 15.0
    """Levanter's time-based (temporary) checkpoint interval."""
    export_hf: bool = False
    """Also write a Hugging Face checkpoint under {output_path}/hf at the end."""
    wandb_project: str | None = None
    """W&B project; None (or no WANDB_API_KEY) logs offline under the output path."""
    require_accelerator: bool = False
    """Fail instead of training on CPU when no accelerator is visible."""


def levanter_environment() -> Any:
    """The locked `StepEnvironment` that `train_lm_levanter` runs in (pass it to ExecutorStep)."""
    from marin_lab.environments import StepEnvironment  # the driver side only

    return StepEnvironment(requirements=LEVANTER_REQUIREMENTS, constraints=LOCK_FILE, python="python3.11")


# --------------------------------------------------------------------------------------------
# from the native trainer's config


def from_native(
    train_cfg: Any,
    train_urls: tuple[str, ...] | list[str],
    validation_urls: tuple[str, ...] | list[str] = (),
    tokenizer: str | None = None,
    output_path: str | None = None,
) -> LevanterTrainConfig:
    """The Levanter run with the model, optimizer and schedule of a native `TrainLmConfig`.

    Levanter tokenizes JSONL itself, so the documents (not the native token caches) are passed in.
    Fields Levanter 1.1 cannot express raise LevanterBackendError naming them.
    """
    model, opt = train_cfg.model, train_cfg.optimizer

    def refuse(field: str, value: Any, why: str) -> None:
        raise LevanterBackendError(f"backend='levanter': {field}={value!r} is not supported: {why}")

    if model.num_kv_heads != model.num_heads:
        refuse(
            "model.num_kv_heads",
            model.num_kv_heads,
            "Levanter 1.1's llama has no grouped-query attention; set it equal to model.num_heads",
        )
    if model.tie_embeddings:
        refuse("model.tie_embeddings", True, "Levanter 1.1's llama always has a separate lm_head")
    if model.head_dim is not None and model.head_dim * model.num_heads != model.hidden_dim:
        refuse("model.head_dim", model.head_dim, "Levanter 1.1 uses head_dim = hidden_dim // num_heads")
    if float(model.rope_theta) != 10000.0:
        refuse("model.rope_theta", model.rope_theta, "Levanter 1.1 fixes the RoPE base at 10000")
    if getattr(train_cfg, "z_loss_weight", 0.0):
        refuse("z_loss_weight", train_cfg.z_loss_weight, "Levanter 1.1 has no z-loss")
    if getattr(train_cfg, "microbatches", 1) != 1:
        refuse(
            "microbatches",
            train_cfg.microbatches,
            "set Levanter's per-device parallelism instead; use microbatches=1 here",
        )
    if getattr(train_cfg, "initialize_from", None):
        refuse("initialize_from", train_cfg.initialize_from, "continue Levanter runs with Levanter checkpoints")
    problem = optimizer_problem(dataclasses.asdict(opt))
    if problem:
        raise LevanterBackendError(f"backend='levanter': {problem}")
    compute = getattr(train_cfg, "compute_dtype", "float32")
    ckpt = getattr(train_cfg, "checkpoint", None)
    every = (
        getattr(ckpt, "keep_every_steps", None) or getattr(ckpt, "save_every_steps", None) or train_cfg.num_train_steps
    )
    interval_s = getattr(ckpt, "save_interval_s", None)
    wandb = getattr(train_cfg, "wandb", None)
    return LevanterTrainConfig(
        output_path=output_path or train_cfg.output_path,
        train_urls=tuple(train_urls),
        validation_urls=tuple(validation_urls),
        tokenizer=tokenizer,
        tokenizer_vocab_size=model.vocab_size,
        seq_len=train_cfg.seq_len,
        hidden_dim=model.hidden_dim,
        intermediate_dim=model.intermediate_dim,
        num_layers=model.num_layers,
        num_heads=model.num_heads,
        initializer_range=model.initializer_std,
        layer_norm_epsilon=model.norm_eps,
        gradient_checkpointing=bool(getattr(train_cfg, "gradient_checkpointing", False)),
        optimizer=dataclasses.asdict(opt),
        num_train_steps=train_cfg.num_train_steps,
        train_batch_size=train_cfg.batch_size,
        seed=train_cfg.seed,
        mixed_precision="f32" if compute == "float32" else f"p=f32,c={compute}",
        checkpoint_every_steps=int(every),
        checkpoint_interval_minutes=(interval_s / 60.0) if interval_s else 60.0 * 24 * 365,
        export_hf=bool(getattr(train_cfg, "export_hf", False)),
        wandb_project=getattr(wandb, "project", None),
    )


def optimizer_problem(optimizer: dict[str, Any]) -> str | None:
    """Why Levanter 1.1 cannot run this optimizer (OptimizerConfig's fields by name), or None."""
    unknown = sorted(set(optimizer) - set(DEFAULT_OPTIMIZER) - {"decay_embeddings"})
    if unknown:
        return f"optimizer has fields OptimizerConfig does not: {unknown}"
    if optimizer.get("schedule", DEFAULT_OPTIMIZER["schedule"]) not in LEVANTER_SCHEDULES:
        return f"optimizer.schedule={optimizer['schedule']!r} is not supported: use {', '.join(LEVANTER_SCHEDULES)}"
    if optimizer.get("schedule_offset"):
        return (
            f"optimizer.schedule_offset={optimizer['schedule_offset']!r} is not supported: Levanter 1.1 "
            "schedules start at step 0"
        )
    return None


def levanter_optimizer(optimizer: dict[str, Any]) -> dict[str, Any]:
    """Levanter 1.1's optimizer section for OptimizerConfig's fields (by name)."""
    opt = {**DEFAULT_OPTIMIZER, **optimizer}
    return {
        "learning_rate": opt["learning_rate"],
        "weight_decay": opt["weight_decay"],
        "beta1": opt["beta1"],
        "beta2": opt["beta2"],
        "epsilon": opt["epsilon"],
        "max_grad_norm": opt["max_grad_norm"],
        "min_lr_ratio": opt["min_lr_ratio"],
        "warmup": opt["warmup"],
        "cooldown": opt["decay"] if opt["schedule"] == "wsd" else 0.0,
        "lr_schedule": LEVANTER_SCHEDULES[opt["schedule"]],
    }


# --------------------------------------------------------------------------------------------
# the Levanter YAML (pure: a function of the config)


def _paths(config: LevanterTrainConfig) -> dict[str, str]:
    out = os.path.abspath(config.output_path)
    work = os.path.join(out, "levanter")
    return {
        "out": out,
        "work": work,
        "yaml": os.path.join(work, "train_lm.yaml"),
        "tokenizer": config.tokenizer or os.path.join(out, "tokenizer"),
        "cache": os.path.join(work, "cache"),
        "checkpoints": os.path.join(out, "checkpoints"),
        "hf": os.path.join(out, "hf"),
        "wandb": work,
    }


def run_id(config: LevanterTrainConfig) -> str:
    """A stable run id (the output directory's name), so a restarted step resumes its checkpoints."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", os.path.basename(os.path.abspath(config.output_path)))[:64] or "run"


def levanter_config_dict(config: LevanterTrainConfig) -> dict[str, Any]:
    """Levanter 1.1's `TrainLmConfig`, as the dict its YAML parser (draccus) reads."""
    p = _paths(config)
    validation = config.validation_urls or config.train_urls[:1]
    trainer: dict[str, Any] = {
        "id": run_id(config),
        "seed": config.seed,
        "mp": config.mixed_precision,
        "num_train_steps": config.num_train_steps,
        "train_batch_size": config.train_batch_size,
        "steps_per_eval": config.steps_per_eval,
        "max_eval_batches": config.max_eval_batches,
        "require_accelerator": config.require_accelerator,
        "log_dir": os.path.join(p["work"], "logs"),
        "run_base_dir": os.path.join(p["work"], "runs"),
        "checkpointer": {
            "base_path": p["checkpoints"],
            "save_interval": f"{config.checkpoint_interval_minutes}m",
            "keep": [{"every": config.checkpoint_every_steps}],
        },
        "wandb": {
            "project": config.wandb_project or "marin_lab",
            "mode": _wandb_mode(config),
            "save_code": False,
            "resume": "allow",
        },
    }
    doc: dict[str, Any] = {
        "data": {
            "train_urls": [_abs(u) for u in config.train_urls],
            "validation_urls": [_abs(u) for u in validation],
            "tokenizer": p["tokenizer"],
            "cache_dir": p["cache"],
        },
        "model": {
            "type": "llama",
            "seq_len": config.seq_len,
            "hidden_dim": config.hidden_dim,
            "intermediate_dim": config.intermediate_dim,
            "num_layers": config.num_layers,
            "num_heads": config.num_heads,
            "initializer_range": config.initializer_range,
            "layer_norm_epsilon": config.layer_norm_epsilon,
            "gradient_checkpointing": config.gradient_checkpointing,
        },
        "trainer": trainer,
        "optimizer": levanter_optimizer(config.optimizer),
    }
    if config.export_hf:
        doc["hf_save_path"] = p["hf"]
        doc["hf_save_steps"] = config.num_train_steps
    return doc


def render_levanter_yaml(config: LevanterTrainConfig) -> str:
    """The YAML text of `levanter_config_dict` (JSON is valid YAML; PyYAML is used when present)."""
    doc = levanter_config_dict(config)
    try:
        import yaml
    except ImportError:
        return json.dumps(doc, indent=2) + "\n"
    return yaml.safe_dump(doc, sort_keys=False)


def _abs(url: str) -> str:
    return url if "://" in url else os.path.abspath(url)


def _wandb_mode(config: LevanterTrainConfig) -> str:
    online = config.wandb_project and os.environ.get("WANDB_API_KEY") and os.environ.get("WANDB_MODE") != "offline"
    return "online" if online else "offline"


# --------------------------------------------------------------------------------------------
# the step


def validate(config: LevanterTrainConfig) -> None:
    """Checks that need no Levanter: raises LevanterBackendError naming the field or file."""
    if "://" in config.output_path and not config.output_path.startswith("file://"):
        raise LevanterBackendError(
            f"output_path={config.output_path!r}: the Levanter backend writes a local working directory "
            "(tokenizer, offline HF names, Ray temp); use a local or mounted path"
        )
    if not config.train_urls:
        raise LevanterBackendError("train_urls is empty: give the JSONL documents to train on")
    for field in ("train_urls", "validation_urls"):
        for url in getattr(config, field):
            if "://" not in url and not os.path.exists(url):
                raise LevanterBackendError(f"{field}: {url!r} does not exist")
            if not re.search(r"\.(jsonl|json|txt)(\.gz)?$", url):
                raise LevanterBackendError(
                    f"{field}: {url!r} is not .jsonl/.jsonl.gz; Levanter 1.1 in this environment reads "
                    "no other format (zstd is not installed there)"
                )
    if config.tokenizer and not os.path.isdir(config.tokenizer):
        raise LevanterBackendError(f"tokenizer={config.tokenizer!r} is not a local tokenizer directory")
    for name in (
        "seq_len",
        "hidden_dim",
        "intermediate_dim",
        "num_layers",
        "num_heads",
        "num_train_steps",
        "train_batch_size",
        "checkpoint_every_steps",
    ):
        if getattr(config, name) <= 0:
            raise LevanterBackendError(f"{name}={getattr(config, name)} must be positive")
    problem = optimizer_problem(config.optimizer)
    if problem:
        raise LevanterBackendError(problem)
    if config.hidden_dim % config.num_heads or (config.hidden_dim // config.num_heads) % 2:
        raise LevanterBackendError(
            f"hidden_dim={config.hidden_dim} must split into num_heads={config.num_heads} heads of even width"
        )


def levanter_process_env(base: Mapping[str, str], *, wandb_dir: str, wandb_mode: str, ray_tmp: str) -> dict[str, str]:
    """The environment of the `levanter.main.train_lm` process: offline hubs, its own W&B folder.

    `WANDB_SERVICE` is left out: a process that already ran W&B (a driver that trained in-process
    before) holds there the address of its own W&B service, in its wandb version's token format,
    which Levanter's older wandb cannot parse ("token must have 5 parts") and whose service is not
    Levanter's to share.
    """
    env = {k: v for k, v in base.items() if k != "WANDB_SERVICE"}
    env.update(
        {
            "WANDB_DIR": wandb_dir,
            "WANDB_MODE": wandb_mode,
            "WANDB_ERROR_REPORTING": "false",
            "WANDB_SILENT": "true",
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "RAY_TMPDIR": ray_tmp,
            "RAY_USAGE_STATS_ENABLED": "0",
            "TOKENIZERS_PARALLELISM": "false",
        }
    )
    return env


def train_lm_levanter(config: LevanterTrainConfig) -> dict[str, Any]:
    """Train with `levanter.main.train_lm` (in the Levanter environment); native-style outputs."""
    validate(config)
    p = _paths(config)
    os.makedirs(p["work"], exist_ok=True)
    started = time.time()
    if config.tokenizer is None and not os.path.exists(os.path.join(p["tokenizer"], "tokenizer.json")):
        train_tokenizer(config.train_urls, p["tokenizer"], config.tokenizer_vocab_size)
    write_hf_reference_dirs(p["work"], p["tokenizer"], config)
    Path(p["yaml"]).write_text(render_levanter_yaml(config))
    ray_tmp = tempfile.mkdtemp(prefix="mlray-")  # short: Ray's unix socket paths must fit 107 bytes
    env = levanter_process_env(os.environ, wandb_dir=p["wandb"], wandb_mode=_wandb_mode(config), ray_tmp=ray_tmp)
    run_workers_at_normal_priority(env)  # Levanter builds its token cache in Ray workers
    cmd = [sys.executable, "-m", "levanter.main.train_lm", "--config_path", p["yaml"]]
    logger.info("levanter: %s (cwd %s)", " ".join(cmd), p["work"])
    try:
        returncode, tail = _run_streaming(cmd, p["work"], env, os.path.join(p["work"], "train.log"))
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    if returncode:
        raise LevanterBackendError(
            f"levanter.main.train_lm exited with code {returncode} (log: {p['work']}/train.log). Output tail:\n{tail}"
        )
    metrics = _complete_metrics(p["wandb"], os.path.join(p["out"], "metrics.jsonl"), config.num_train_steps)
    _remove_symlinks(p["work"])
    checkpoints = mark_complete_checkpoints(p["checkpoints"])
    if not checkpoints:
        raise LevanterBackendError(f"levanter finished but wrote no checkpoint under {p['checkpoints']}")
    losses = [m["loss"] for m in metrics if m.get("loss") is not None]
    summary = {
        "backend": "levanter",
        "levanter": _version("levanter"),
        "jax": _version("jax"),
        "steps": config.num_train_steps,
        "final_loss": losses[-1] if losses else None,
        "first_loss": losses[0] if losses else None,
        "checkpoints": checkpoints,
        "metrics": os.path.join(p["out"], "metrics.jsonl"),
        "config_yaml": p["yaml"],
        "tokenizer": p["tokenizer"],
        "hf": p["hf"] if config.export_hf else None,
        "wall_s": round(time.time() - started, 1),
    }
    Path(p["out"], "train_summary.json").write_text(json.dumps(summary, indent=2))
    logger.info(
        "levanter: %d steps, loss %s -> %s, %d checkpoint(s) in %s",
        config.num_train_steps,
        summary["first_loss"],
        summary["final_loss"],
        len(checkpoints),
        p["checkpoints"],
    )
    return summary


def _remove_symlinks(root: str) -> None:
    # W&B's `wandb/latest-run` link: the executor's manifest hashes plain files only.
    for dirpath, dirnames, filenames in os.walk(root):
        for path in (
            os.path.join(dirpath, n) for n in dirnames + filenames if os.path.islink(os.path.join(dirpath, n))
        ):
            os.unlink(path)


def _version(dist: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:  # pragma: no cover - both are in the Levanter lock
        return None


def _run_streaming(cmd: list[str], cwd: str, env: dict[str, str], log_path: str) -> tuple[int, str]:
    """Run cmd, echoing its output and keeping it in log_path; (exit code, last lines)."""
    tail: list[str] = []
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            cmd,
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
        )
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                sys.stdout.write(line)
                log.write(line)
                tail = (tail + [line.rstrip("\n")])[-60:]
            proc.wait()
        finally:
            if proc.poll() is None:
                proc.terminate()
                proc.wait()
    return proc.returncode, "\n".join(tail)


# --------------------------------------------------------------------------------------------
# tokenizer and the offline Hugging Face names


def _iter_texts(urls: tuple[str, ...], limit_bytes: int) -> Iterator[str]:
    seen = 0
    for url in urls:
        opener = gzip.open if url.endswith(".gz") else open
        with opener(url, "rt", encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    continue
                text = json.loads(line).get("text") or ""
                seen += len(text)
                yield text
                if seen >= limit_bytes:
                    return


def train_tokenizer(urls: tuple[str, ...], out_dir: str, vocab_size: int) -> None:
    """A llama-style (BOS-prefixed) byte-level BPE trained on the documents, saved for AutoTokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<unk>", "<s>", "</s>"]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(_iter_texts(tuple(urls), _TOKENIZER_TEXT_BYTES), trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", tok.token_to_id("<s>"))]
    )
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    hf.save_pretrained(out_dir)
    logger.info("levanter: trained a %d-token BPE on %s -> %s", tok.get_vocab_size(), urls[0], out_dir)


def write_hf_reference_dirs(work: str, tokenizer_dir: str, config: LevanterTrainConfig) -> None:
    """Local stand-ins for the HF names Levanter's llama converter loads (resolved relative to cwd)."""
    from transformers import AutoTokenizer, LlamaConfig

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    hf_config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=config.hidden_dim,
        intermediate_size=config.intermediate_dim,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        num_key_value_heads=config.num_heads,
        max_position_embeddings=config.seq_len,
        rms_norm_eps=config.layer_norm_epsilon,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    hf_config.architectures = ["LlamaForCausalLM"]
    for name in HF_REFERENCE_DIRS:
        target = os.path.join(work, name)
        os.makedirs(target, exist_ok=True)
        tokenizer.save_pretrained(target)
        hf_config.to_json_file(os.path.join(target, "config.json"))


# --------------------------------------------------------------------------------------------
# after the run: metrics.jsonl and checkpoint markers

_METRIC_KEYS = {
    "train/loss": "loss",
    "learning_rate": "learning_rate",
    "optim/learning_rate": "learning_rate",
    "throughput/tokens_per_second": "tokens_per_s",
    "eval/loss": "eval_loss",
    "grad_norm": "grad_norm",
    "optim/grad_norm": "grad_norm",
}


def _wandb_history(wandb_dir: str) -> list[dict[str, Any]]:
    """History rows of the newest W&B run under wandb_dir, read from its .wandb log."""
    # This runs inside Levanter's environment, whose wandb has these; the checker reads ours.
    from wandb.proto import wandb_internal_pb2
    from wandb.sdk.internal import datastore  # type: ignore[attr-defined]

    runs = sorted(Path(wandb_dir).glob("wandb/*run-*/run-*.wandb"), key=lambda f: f.stat().st_mtime)
    if not runs:
        return []
    store = datastore.DataStore()
    store.open_for_scan(str(runs[-1]))
    rows = []
    while True:
        data = store.scan_data()
        if data is None:
            break
        record = wandb_internal_pb2.Record()  # type: ignore[attr-defined]
        record.ParseFromString(data)
        if record.WhichOneof("record_type") == "history":
            row = {}
            for item in record.history.item:
                key = item.key or "/".join(item.nested_key)
                try:
                    row[key] = json.loads(item.value_json)
                except ValueError:
                    continue
            rows.append(row)
    return rows


def write_metrics_jsonl(wandb_dir: str, path: str) -> list[dict[str, Any]]:
    """One line per step in the native trainer's keys (loss, learning_rate, tokens_per_s, ...)."""
    by_step: dict[int, dict[str, Any]] = {}
    for row in _wandb_history(wandb_dir):
        step = row.get("_step", row.get("global_step"))
        if not isinstance(step, (int, float)):
            continue
        merged = by_step.setdefault(int(step), {"step": int(step)})
        for key, value in row.items():
            if key in _METRIC_KEYS and isinstance(value, (int, float)):
                merged[_METRIC_KEYS[key]] = value
        if isinstance(row.get("_timestamp"), (int, float)):
            merged["time"] = row["_timestamp"]
    rows = [by_step[s] for s in sorted(by_step) if "loss" in by_step[s] or "eval_loss" in by_step[s]]
    with open(path, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    return rows


def _complete_metrics(wandb_dir: str, path: str, num_steps: int, timeout_s: float = 120.0) -> list[dict[str, Any]]:
    """metrics.jsonl once W&B's log holds the last step's loss.

    W&B's service process may still be writing its log after the trainer exits (seconds on a
    loaded machine), so the log is read until it is complete; never is an error, not an empty file.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        metrics = write_metrics_jsonl(wandb_dir, path)
        last = max((m["step"] for m in metrics if "loss" in m), default=-1)
        if last >= num_steps - 1:
            return metrics
        if time.monotonic() > deadline:
            raise LevanterBackendError(
                f"levanter finished, but its W&B log under {wandb_dir} holds training loss only up to step "
                f"{last} of {num_steps} after {timeout_s:.0f}s; see train.log in the step's work folder"
            )
        time.sleep(0.5)


def mark_complete_checkpoints(root: str) -> list[str]:
    """Levanter writes metadata.json last in a checkpoint: add our COMPLETE marker beside it."""
    done = []
    for meta in sorted(Path(root).glob("**/step-*/metadata.json")):
        marker = meta.parent / "COMPLETE"
        if not marker.exists():
            marker.write_text(json.dumps({"step": int(meta.parent.name.split("-")[-1]), "backend": "levanter"}))
        done.append(str(meta.parent))
    return done
