"""Model loading shared by evaluation and generation, chat formats, and `marin-lab generate`."""

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from marin_lab.cli import main
from marin_lab.evaluation.loading import ModelLoadError, chat_format, find_tokenizer, load_model
from marin_lab.models.generate import SamplingConfig, generate_tokens
from marin_lab.models.llama import init_params
from marin_lab.peft.lora import LoraConfig, init_lora, merge_lora
from marin_lab.processing.instruction import ChatTemplate
from marin_lab.testing.training import tiny_model
from marin_lab.training import checkpoint as ckpt
from marin_lab.training.base_model import QuantConfig, QuantizeBaseConfig
from marin_lab.training.base_quantize import quantize_base

WORDS = "the cat dog sat on mat log a question answer is what".split()


def _tokenizer() -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator([" ".join(WORDS)] * 10 + ["### Question:\n", "### Answer:\n"], trainer)
    return tok


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A train-like output (checkpoints/step-000007 + hf/tokenizer.json) of a random tiny model."""
    root = tmp_path_factory.mktemp("gen")
    tok = _tokenizer()
    model = tiny_model(vocab_size=tok.get_vocab_size(), initializer_std=0.2)
    params = init_params(model, jax.random.key(0))
    out = root / "train"
    ckpt.save_checkpoint(
        ckpt.step_dir(str(out / "checkpoints"), 7), {"params": params}, {"model": dataclasses.asdict(model), "step": 7}
    )
    (out / "hf").mkdir()
    (out / "hf" / "tokenizer.json").write_text(tok.to_str())
    return root, out, tok, model, params


def _leaves_close(a, b, atol=1e-6):
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)
    for x, y in zip(la, lb, strict=True):
        np.testing.assert_allclose(np.asarray(x, np.float32), np.asarray(y, np.float32), atol=atol)


def test_load_model_from_a_run_or_a_step_folder(run):
    _, out, _, model, params = run
    for path in (str(out), str(out / "checkpoints" / "step-000007")):
        found, loaded, resolved, step = load_model(path)
        assert found == model and step == 7 and resolved.endswith("step-000007")
        _leaves_close(loaded, params, atol=0)
    assert find_tokenizer(str(out / "checkpoints" / "step-000007")) == str(out / "hf" / "tokenizer.json")
    with pytest.raises(ModelLoadError, match="no complete checkpoint"):
        load_model(str(out / "nothing"))


@pytest.mark.slow
def test_load_lora_and_qlora_adapters_merged_into_their_base(run):
    root, out, _, model, params = run
    lora = LoraConfig(rank=4, alpha=8.0, dropout=0.0)
    adapters = init_lora(lora, model, jax.random.key(1))
    # Non-zero B so the merge changes the weights.
    adapters = jax.tree_util.tree_map(lambda x: x + 0.05, adapters)
    qbase = str(root / "quantized")
    quantize_base(QuantizeBaseConfig(base=str(out), output_path=qbase, quant=QuantConfig(block_size=64)))
    _, qparams, _, _ = load_model(qbase)  # NF4 projections, dequantized
    assert max(float(jnp.abs(qparams["layers"]["wq"] - params["layers"]["wq"]).max()), 0) > 0
    assert float(jnp.abs(qparams["layers"]["wq"] - params["layers"]["wq"]).max()) < 0.2
    for mode, base, base_params in (("lora", str(out), params), ("qlora", qbase, qparams)):
        ft = root / f"ft_{mode}"
        ckpt.save_checkpoint(
            ckpt.step_dir(str(ft / "checkpoints"), 3),
            {"trainable": adapters, "step": jnp.int32(3)},
            {
                "model": dataclasses.asdict(model),
                "mode": mode,
                "base": base,
                "lora": dataclasses.asdict(lora),
                "step": 3,
            },
        )
        _, merged, resolved, step = load_model(str(ft))
        assert step == 3 and "ft_" + mode in resolved
        _leaves_close(merged, merge_lora(base_params, adapters, lora), atol=1e-5)
        assert float(jnp.abs(merged["layers"]["wq"] - base_params["layers"]["wq"]).max()) > 1e-3
        # The fine-tune's tokenizer is its base's.
        assert find_tokenizer(str(ft)) == str(out / "hf" / "tokenizer.json")
    # A finished fine-tune's merged/ checkpoint wins over its adapters.
    merged_dir = root / "ft_lora" / "merged" / "checkpoints"
    ckpt.save_checkpoint(
        ckpt.step_dir(str(merged_dir), 3),
        {"params": params},
        {"model": dataclasses.asdict(model), "mode": "lora", "step": 3},
    )
    _, loaded, resolved, _ = load_model(str(root / "ft_lora"))
    assert "/merged/" in resolved
    _leaves_close(loaded, params, atol=0)


def _cli(capsys, *argv):
    code = main(["generate", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.slow
def test_cli_generates_what_the_api_generates(run, capsys):
    _, out, tok, model, params = run
    code, stdout, err = _cli(
        capsys, str(out), "--prompt", "the cat", "--prompt", "a dog sat on the", "--max_tokens", "6", "--json"
    )
    assert code == 0, err
    lines = [json.loads(line) for line in stdout.splitlines()]
    eos = tok.token_to_id("<|endoftext|>")
    want = generate_tokens(
        params,
        model,
        [tok.encode("the cat").ids, tok.encode("a dog sat on the").ids],
        SamplingConfig(max_new_tokens=6, stop_token_ids=(eos,)),
    )
    assert [line["completion"] for line in lines] == [tok.decode(w) for w in want]
    assert [line["new_tokens"] for line in lines] == [len(w) for w in want]
    assert "step 7" in err and "chat template off" in err
    # Sampling: a seed reproduces, the text mode prints prompt + continuation.
    first = _cli(capsys, str(out), "--prompt", "the", "--temperature", "1.0", "--top_p", "0.9", "--seed", "4")
    again = _cli(capsys, str(out), "--prompt", "the", "--temperature", "1.0", "--top_p", "0.9", "--seed", "4")
    assert first[0] == 0 and first[1] == again[1] and first[1].startswith("the")


@pytest.mark.slow
def test_cli_chat_fine_tune_renders_the_template(run, capsys):
    root, out, tok, model, params = run
    ft = root / "chat_ft"
    template = ChatTemplate()
    eos = tok.token_to_id("<|endoftext|>")
    ckpt.save_checkpoint(
        ckpt.step_dir(str(ft / "merged" / "checkpoints"), 2),
        {"params": params},
        {
            "model": dataclasses.asdict(model),
            "mode": "full",
            "step": 2,
            "chat": {"template": dataclasses.asdict(template), "bos_id": None, "eos_id": eos},
        },
    )
    (ft / "hf").mkdir(parents=True)
    (ft / "hf" / "tokenizer.json").write_text(tok.to_str())
    fmt = chat_format(str(ft))
    assert fmt is not None and fmt.template == template and fmt.eos_id == eos
    ids = fmt.prompt_ids(tok, "what is a cat")
    segments = ["### Question:\n", "what is a cat", "\n\n", "### Answer:\n"]
    assert ids == [i for s in segments for i in tok.encode(s, add_special_tokens=False).ids]
    code, stdout, err = _cli(capsys, str(ft), "--prompt", "what is a cat", "--max_tokens", "5", "--json")
    assert code == 0 and "chat template on" in err
    want = generate_tokens(params, model, [ids], SamplingConfig(max_new_tokens=5, stop_token_ids=(eos,)))[0]
    text = tok.decode(want)
    assert json.loads(stdout)["completion"] == (text.split("### Question:\n")[0])
    code, stdout, err = _cli(capsys, str(ft), "--prompt", "what is a cat", "--max_tokens", "5", "--json", "--no-chat")
    assert code == 0 and "chat template off" in err
    raw = generate_tokens(
        params, model, [tok.encode("what is a cat").ids], SamplingConfig(max_new_tokens=5, stop_token_ids=(eos,))
    )[0]
    assert json.loads(stdout)["new_tokens"] == len(raw)
    assert chat_format(str(out)) is None  # a pretraining run is not a chat model


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--max_tokens", "abc"], "--max_tokens='abc' is not an integer"),
        (["--max_tokens", "0"], "--max_tokens='0' must be >= 1"),
        (["--temperature", "-1"], "--temperature='-1' must be >= 0"),
        (["--top_p", "1.5"], "--top_p='1.5' must be > 0 and <= 1"),
        (["--max_tokens", "500"], "--max_tokens=500 leaves no room"),
    ],
)
def test_cli_bad_numbers_are_one_line(run, capsys, argv, message):
    _, out, *_ = run
    code, stdout, err = _cli(capsys, str(out), "--prompt", "the", *argv)
    assert code == 1 and stdout == ""
    assert err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1


def test_cli_bad_checkpoints_are_one_line(run, capsys, tmp_path):
    root, out, tok, model, params = run
    code, _, err = _cli(capsys, str(tmp_path / "missing"), "--prompt", "x")
    assert code == 1 and "does not exist" in err and len(err.strip().splitlines()) == 1
    # A checkpoint with no tokenizer anywhere near it.
    bare = tmp_path / "bare"
    ckpt.save_checkpoint(
        ckpt.step_dir(str(bare / "checkpoints"), 1), {"params": params}, {"model": dataclasses.asdict(model), "step": 1}
    )
    code, _, err = _cli(capsys, str(bare), "--prompt", "x")
    assert code == 1 and err.startswith("error: no tokenizer found") and len(err.strip().splitlines()) == 1
    # Damaged: an array file cut short.
    (bare / "hf").mkdir()
    (bare / "hf" / "tokenizer.json").write_text(tok.to_str())
    step = bare / "checkpoints" / "step-000001"
    biggest = max((p for p in (step / "state").rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    biggest.write_bytes(biggest.read_bytes()[:10])
    code, _, err = _cli(capsys, str(bare), "--prompt", "x")
    assert code == 1 and err.startswith("error: ") and "cut short" in err, err
    assert len(err.strip().splitlines()) == 1
    # Damaged metadata.
    (step / "metadata.json").write_text("{not json")
    code, _, err = _cli(capsys, str(step), "--prompt", "x")
    assert code == 1 and "metadata.json" in err and len(err.strip().splitlines()) == 1
    # No prompt.
    code, _, err = _cli(capsys, str(out))
    assert code == 1 and "no prompt" in err
