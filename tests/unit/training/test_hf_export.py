"""An exported `hf/` folder loads in transformers and lm-eval's `hf` backend as is: tokenizer with its
special tokens, generation ids, the same logits as our model, and a chat fine-tune's template."""

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from marin_lab.models.llama import forward, init_params
from marin_lab.processing.instruction import ChatTemplate, render_segments
from marin_lab.testing.training import tiny_model
from marin_lab.training.errors import TrainingError
from marin_lab.training.hf_export import (
    SpecialTokens,
    chat_template_jinja,
    export_hf,
    export_hf_leaves,
    special_tokens,
)

TEXT = "the cat sat on the mat because it was warm; ### Question:\n ### Answer:\n what is a dog"
EOS = "<|endoftext|>"


def _tokenizer(*, bos: str | None = None) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    special = [EOS] + ([bos] if bos else [])
    tok.train_from_iterator(
        [TEXT] * 10,
        trainers.BpeTrainer(
            vocab_size=300, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    if bos:  # as Llama 3's tokenizer.json: the post-processor puts BOS before every text
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tok.token_to_id(bos))]
        )
    return tok


def _export(tmp_path, tok, *, random_weights=False, **kwargs):
    """Export a tiny model with `tok`: random weights (JAX) for comparing logits, else zeros (no JAX)."""
    (tmp_path / "tokenizer.json").write_text(tok.to_str())
    cfg = tiny_model(vocab_size=tok.get_vocab_size())
    hf_dir = str(tmp_path / "hf")
    url = str(tmp_path / "tokenizer.json")
    if random_weights:
        params = init_params(cfg, jax.random.key(0))
        export_hf(params, cfg, hf_dir, tokenizer_url=url, **kwargs)
        return hf_dir, cfg, params
    zeros = [(tuple(name.split("/")), np.zeros(shape, np.float32)) for name, shape in cfg.param_shapes().items()]
    export_hf_leaves(zeros, cfg, hf_dir, tokenizer_url=url, **kwargs)
    return hf_dir, cfg, None


def test_the_folder_has_the_special_tokens_of_the_runs_tokenizer(tmp_path):
    tok = _tokenizer()
    eos = tok.token_to_id(EOS)
    hf_dir, cfg, _ = _export(tmp_path, tok, eos_id=eos)
    config = json.loads((tmp_path / "hf" / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert config["eos_token"] == config["pad_token"] == EOS and "bos_token" not in config
    assert config["model_max_length"] == cfg.max_seq_len
    assert json.loads((tmp_path / "hf" / "special_tokens_map.json").read_text()) == {"eos_token": EOS, "pad_token": EOS}
    assert json.loads((tmp_path / "hf" / "generation_config.json").read_text()) == {
        "eos_token_id": eos,
        "pad_token_id": eos,
    }
    model_config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert (model_config["eos_token_id"], model_config["pad_token_id"], model_config["bos_token_id"]) == (
        eos,
        eos,
        None,
    )


def test_without_recorded_ids_eos_and_bos_come_from_the_tokenizer_itself(tmp_path):
    tok = _tokenizer(bos="<|begin_of_text|>")
    tokens = special_tokens(tok)
    assert tokens.eos == (tok.token_to_id(EOS), EOS)  # find_eos_id's end-of-text tokens
    assert tokens.bos == (tok.token_to_id("<|begin_of_text|>"), "<|begin_of_text|>")  # the post-processor's
    assert special_tokens(_tokenizer()).bos is None
    word_level = Tokenizer(models.WordLevel({"x": 0, EOS: 1}))  # cannot encode a probe text: no BOS, no error
    assert special_tokens(word_level) == SpecialTokens(eos=(1, EOS))
    hf_dir, _, _ = _export(tmp_path, tok)
    assert json.loads((tmp_path / "hf" / "generation_config.json").read_text()) == {
        "bos_token_id": tokens.bos[0],
        "eos_token_id": tokens.eos[0],
        "pad_token_id": tokens.eos[0],
    }


def test_an_eos_id_the_tokenizer_lacks_is_refused_before_any_weight_is_written(tmp_path):
    with pytest.raises(TrainingError, match="eos id 5000 is not in the tokenizer"):
        _export(tmp_path, _tokenizer(), eos_id=5000)
    assert not (tmp_path / "hf" / "model.safetensors").exists()


@pytest.mark.slow  # importing torch and transformers takes seconds
def test_transformers_and_lm_eval_load_the_folder_as_is_with_our_logits(tmp_path):
    import torch  # the test extra installs it; a missing torch must fail, not skip
    from lm_eval.models.huggingface import HFLM
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    tok = _tokenizer()
    eos = tok.token_to_id(EOS)
    hf_dir, cfg, params = _export(tmp_path, tok, eos_id=eos, random_weights=True)

    theirs_tok = AutoTokenizer.from_pretrained(hf_dir)
    assert (theirs_tok.eos_token, theirs_tok.eos_token_id, theirs_tok.pad_token_id) == (EOS, eos, eos)
    ids = tok.encode(TEXT).ids
    assert theirs_tok(TEXT)["input_ids"] == ids
    assert theirs_tok.decode(ids) == tok.decode(ids)
    assert GenerationConfig.from_pretrained(hf_dir).eos_token_id == eos

    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
    tokens = np.asarray([ids[:12]])
    with torch.no_grad():
        theirs = model(torch.tensor(tokens)).logits.numpy()
    ours = np.asarray(forward(params, jnp.asarray(tokens), cfg))
    np.testing.assert_allclose(ours, theirs, atol=1e-4, rtol=1e-4)

    lm = HFLM(pretrained=hf_dir, device="cpu", batch_size=1)  # crashed on a folder without tokenizer_config.json
    assert (lm.eot_token_id, lm.prefix_token_id) == (eos, eos)
    assert len(lm.tokenizer) == tok.get_vocab_size()  # lm-eval added no pad token of its own


ODD = ChatTemplate(system='Sys "quoted" \\ {{ not jinja }}:\n', user="Ünïcode → user:\n", assistant="### A:\n")


@pytest.mark.parametrize("template", [ChatTemplate(), ODD], ids=["default", "odd-characters"])
@pytest.mark.parametrize("bos", [None, "<s>"])
def test_the_chat_template_renders_conversations_as_tokenize_instructions_did(template, bos):
    from jinja2.sandbox import ImmutableSandboxedEnvironment  # what transformers renders chat templates with

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    jinja = env.from_string(chat_template_jinja(template, eos=EOS, bos=bos))
    conversation = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "what is a cat?"},
        {"role": "assistant", "content": "an animal"},
    ]
    start = bos or ""
    trained = start + "".join(text for text, _ in render_segments(conversation, template)) + EOS
    assert jinja.render(messages=conversation, add_generation_prompt=False) == trained
    prompt = conversation[:2]
    asked = render_segments([*prompt, {"role": "assistant", "content": ""}], template)  # as ChatFormat.prompt_ids
    assert jinja.render(messages=prompt, add_generation_prompt=True) == start + "".join(text for text, _ in asked)


@pytest.mark.slow  # importing transformers takes seconds
def test_a_chat_export_carries_its_template_to_apply_chat_template(tmp_path):
    from transformers import AutoTokenizer

    tok = _tokenizer()
    hf_dir, _, _ = _export(tmp_path, tok, eos_id=tok.token_to_id(EOS), chat_template=ChatTemplate())
    theirs = AutoTokenizer.from_pretrained(hf_dir)
    text = theirs.apply_chat_template(
        [{"role": "user", "content": "what is a dog"}], tokenize=False, add_generation_prompt=True
    )
    assert text == "### Question:\nwhat is a dog\n\n### Answer:\n"


@pytest.mark.slow  # a fine-tune compiles its step
def test_a_chat_fine_tunes_hf_folder_has_its_instruction_caches_template(tmp_path):
    from transformers import AutoTokenizer

    from marin_lab.peft import LoraConfig
    from marin_lab.processing.instruction import TokenizeInstructionsConfig, tokenize_instructions
    from marin_lab.training import checkpoint as ckpt
    from marin_lab.training.data import DataConfig
    from marin_lab.training.finetune import FinetuneConfig, finetune_lm
    from marin_lab.training.metrics import WandbConfig

    tok = _tokenizer()
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "tokenizer.json").write_text(tok.to_str())
    records = [{"id": f"r{i}", "prompt": f"what is a cat {i}", "response": "a warm dog"} for i in range(40)]
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    template = ChatTemplate(user="Q: ", assistant="A: ", separator="\n")
    tokenize_instructions(
        TokenizeInstructionsConfig(
            input_path=str(tmp_path / "in"),
            output_path=str(tmp_path / "cache"),
            tokenizer=str(tmp_path / "tok"),
            template=template,
        )
    )
    model = tiny_model(vocab_size=tok.get_vocab_size())
    base = str(tmp_path / "base")
    ckpt.save_checkpoint(
        ckpt.step_dir(f"{base}/checkpoints", 0),
        {"params": init_params(model, jax.random.key(0))},
        {"model": dataclasses.asdict(model), "step": 0},
    )
    summary = finetune_lm(
        FinetuneConfig(
            output_path=str(tmp_path / "ft"),
            data=DataConfig(caches={"qa": str(tmp_path / "cache")}),
            base=base,
            mode="lora",  # the merged model is exported
            lora=LoraConfig(rank=4, alpha=8.0, dropout=0.0),
            num_train_steps=1,
            batch_size=2,
            seq_len=32,
            compute_dtype="float32",
            eval_max_sequences=1,
            save_merged=False,
            wandb=WandbConfig(enabled=False),
        )
    )
    theirs = AutoTokenizer.from_pretrained(summary["hf_path"])
    asked = theirs.apply_chat_template(
        [{"role": "user", "content": "what"}], tokenize=False, add_generation_prompt=True
    )
    assert asked == "Q: what\nA: "
    assert theirs.eos_token == EOS
