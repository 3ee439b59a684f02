"""`marin-lab generate CHECKPOINT --prompt TEXT`: a quick look at what a model writes.

CHECKPOINT is what evaluation takes (a train or fine-tune step's output path, one `step-NNNNNN`
folder, a quantize_base output or a Hugging Face folder: `evaluation.loading`). The prompt is
encoded with the checkpoint's tokenizer; generation stops at the tokenizer's end-of-text token,
`--max_tokens`, or a `--until` string. A chat fine-tune (its checkpoint records the instruction
cache's chat template) gets each prompt rendered as one user turn followed by the assistant's
marker, as in training, and stops where the next user turn would begin; `--chat` forces that
(the default template for a model that records none), `--no-chat` sends the raw text.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import time
from typing import Any

from marin_lab.errors import MarinLabError
from marin_lab.io import fs as mfs
from marin_lab.processing.errors import TokenizeError

__all__ = ["add_parser"]

DEFAULT_MAX_TOKENS = 128
"""New tokens per prompt when --max_tokens is not given (at most half the model's context)."""


class GenerateArgumentError(MarinLabError, ValueError):
    """A `marin-lab generate` option with a value it cannot use."""


def _number(name: str, text: str, kind: type, *, low: float, low_open: bool = False, high: float | None = None) -> Any:
    try:
        value = kind(text)
    except ValueError:
        raise GenerateArgumentError(f"--{name}={text!r} is not {'an integer' if kind is int else 'a number'}") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise GenerateArgumentError(f"--{name}={text!r} must be finite")
    if value < low or (low_open and value == low) or (high is not None and value > high):
        bound = f"{'>' if low_open else '>='} {low:g}" + (f" and <= {high:g}" if high is not None else "")
        raise GenerateArgumentError(f"--{name}={text!r} must be {bound}")
    return value


def _prompts(args: argparse.Namespace) -> list[str]:
    prompts = list(args.prompt or [])
    if args.prompts_file:
        if not mfs.exists(args.prompts_file):
            raise GenerateArgumentError(f"--prompts_file {args.prompts_file} does not exist")
        try:
            text = mfs.read_text(args.prompts_file)
        except UnicodeDecodeError:
            raise GenerateArgumentError(f"--prompts_file {args.prompts_file} is not UTF-8 text") from None
        prompts += [line for line in text.splitlines() if line.strip()]
    if not prompts:
        raise GenerateArgumentError("no prompt: pass --prompt TEXT (repeatable) or --prompts_file FILE (one per line)")
    return prompts


def _cmd_generate(args: argparse.Namespace) -> int:
    max_tokens = None if args.max_tokens is None else _number("max_tokens", args.max_tokens, int, low=1)
    temperature = _number("temperature", args.temperature, float, low=0)
    top_p = _number("top_p", args.top_p, float, low=0, low_open=True, high=1)
    seed = _number("seed", args.seed, int, low=0)
    batch_size = _number("batch_size", args.batch_size, int, low=1)
    prompts = _prompts(args)
    if not mfs.exists(args.checkpoint):
        raise GenerateArgumentError(
            f"checkpoint {args.checkpoint} does not exist; give a train or fine-tune "
            "step's output path or a step-NNNNNN folder"
        )
    # The model's side (JAX, tokenizers) is imported here, not with the CLI: every other
    # `marin-lab` command starts without it (about 1.3 s less on 2 cores).
    from marin_lab.evaluation.loading import ChatFormat, chat_format, load_model, load_tokenizer_for
    from marin_lab.models.generate import Generation, SamplingConfig, generate_text
    from marin_lab.processing.instruction import ChatTemplate
    from marin_lab.processing.tokenizers import find_eos_id

    tokenizer, tokenizer_url = load_tokenizer_for(args.checkpoint, args.tokenizer)
    started = time.perf_counter()
    model, params, resolved, step = load_model(args.checkpoint)
    loaded = time.perf_counter() - started

    if max_tokens is None:
        max_tokens = min(DEFAULT_MAX_TOKENS, model.max_seq_len // 2)
    elif max_tokens >= model.max_seq_len:
        raise GenerateArgumentError(
            f"--max_tokens={max_tokens} leaves no room for a prompt in the model's context "
            f"(max_seq_len={model.max_seq_len}); ask for fewer tokens"
        )
    recorded = chat_format(args.checkpoint)
    chat: ChatFormat | None = None
    if args.chat is True:
        chat = recorded or ChatFormat(ChatTemplate())
    elif args.chat is None:
        chat = recorded
    stop_ids: list[int] = []
    if chat is not None and chat.eos_id is not None:
        stop_ids.append(int(chat.eos_id))
    with contextlib.suppress(TokenizeError):
        stop_ids.append(find_eos_id(tokenizer, None))
    until = list(args.until or [])
    if chat is not None and chat.template.user.strip():
        until.append(chat.template.user)  # the model starting the next user turn
    sampling = SamplingConfig(
        max_new_tokens=max_tokens,
        temperature=temperature,
        top_p=top_p,
        seed=seed,
        stop_token_ids=tuple(dict.fromkeys(stop_ids)),
    )
    ids = [chat.prompt_ids(tokenizer, p) for p in prompts] if chat is not None else None
    result = Generation([], [], [])
    started = time.perf_counter()
    try:
        texts = generate_text(
            params,
            model,
            tokenizer,
            prompts,
            sampling,
            until=until,
            prompt_ids=ids,
            batch_size=min(batch_size, len(prompts)),
            compute_dtype=args.compute_dtype,
            result=result,
        )
    except ValueError as err:
        raise GenerateArgumentError(str(err)) from None
    seconds = time.perf_counter() - started
    new_tokens = sum(len(t) for t in result.tokens)
    print(
        f"checkpoint {resolved} (step {step}), tokenizer {tokenizer_url}, chat template "
        f"{'on' if chat is not None else 'off'}; loaded in {loaded:.1f} s; {new_tokens} new tokens in "
        f"{seconds:.1f} s ({new_tokens / max(seconds, 1e-9):.1f} tokens/s, compile included)"
        + (f"; {result.num_truncated} prompt(s) cut from the left to fit the context" if result.num_truncated else ""),
        file=sys.stderr,
    )
    for i, (prompt, text) in enumerate(zip(prompts, texts, strict=True)):
        if args.json:
            print(
                json.dumps(
                    {
                        "prompt": prompt,
                        "completion": text,
                        "new_tokens": len(result.tokens[i]),
                        "finish_reason": result.finish_reasons[i],
                        "truncated_prompt_tokens": result.truncated[i],
                    },
                    ensure_ascii=False,
                )
            )
        else:
            if len(prompts) > 1:
                print(f"--- {i + 1}/{len(prompts)} ({result.finish_reasons[i]}, {len(result.tokens[i])} tokens)")
            print(f"{prompt}{text}" if chat is None else text)
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("generate", help="generate text from a checkpoint (greedy or sampled) for a quick look")
    p.add_argument("checkpoint", help="a train or fine-tune step's output path, a step-NNNNNN folder or a HF folder")
    p.add_argument("--prompt", action="append", help="prompt text (repeatable)")
    p.add_argument("--prompts_file", help="a text file of prompts, one per line")
    p.add_argument(
        "--max_tokens",
        help=f"new tokens per prompt at most (default {DEFAULT_MAX_TOKENS}, at most half the model's context)",
    )
    p.add_argument("--temperature", default="0", help="0 (default): greedy; otherwise sample at this temperature")
    p.add_argument("--top_p", default="1", help="nucleus sampling mass in (0, 1] (default 1: off)")
    p.add_argument("--seed", default="0", help="seed of the draws (default 0)")
    p.add_argument("--until", action="append", help="stop string (repeatable): the text is cut before it")
    chat = p.add_mutually_exclusive_group()
    chat.add_argument(
        "--chat",
        dest="chat",
        action="store_const",
        const=True,
        default=None,
        help="render prompts with the chat template (default: when the checkpoint records one)",
    )
    chat.add_argument("--no-chat", dest="chat", action="store_const", const=False, help="send the raw prompt text")
    p.add_argument("--tokenizer", help="a tokenizer.json (default: the checkpoint's, see docs/evaluation.md)")
    p.add_argument("--batch_size", default="8", help="prompts decoded together (default 8)")
    p.add_argument("--compute_dtype", default="float32", choices=("float32", "bfloat16"))
    p.add_argument("--json", action="store_true", help="one JSON object per prompt instead of text")
    p.set_defaults(func=_cmd_generate)
