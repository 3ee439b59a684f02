"""The recipe layer: identity declared on config classes, Marin-shaped helpers, plan-time checks."""

from __future__ import annotations

import dataclasses

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from experiments.defaults import (
    default_download,
    default_eval,
    default_extract,
    default_tokenize,
    default_train,
    default_train_tokenizer,
    lm_data_config,
    lm_mixture_data_config,
)
from experiments.llama import llama_nano
from experiments.simple_train_config import CpuOnlyConfig, SimpleTrainConfig, TpuPodConfig
from marin_lab.evaluation import CORE_TASKS
from marin_lab.execution import (
    EncodingError,
    ExecutorStep,
    StepDefinitionError,
    VersionedValue,
    output_path_of,
    this_output_path,
    versioned,
    versioned_field,
)
from marin_lab.execution.plan.hashing import scan_config
from marin_lab.execution.plan.planner import build_plan
from marin_lab.training import OptimizerConfig
from tests.executor_steps import write_text


@dataclasses.dataclass(frozen=True)
class Declared:
    output_path: str
    text: str = versioned_field()
    inputs: tuple = versioned_field(())
    workers: int = 1


@dataclasses.dataclass(frozen=True)
class Wrapped:
    output_path: str
    text: str
    inputs: tuple = ()
    workers: int = 1


def _identity(config) -> str:
    return build_plan([ExecutorStep("s", write_text, config)], "/p").steps[0].identity


def test_versioned_field_counts_like_versioned():
    declared = Declared(this_output_path(), "a", ("x", "y"))
    assert (
        scan_config(declared, step_label="s").versioned
        == scan_config(Wrapped(this_output_path(), versioned("a"), versioned(("x", "y"))), step_label="s").versioned
    )
    assert _identity(declared) != _identity(Declared(this_output_path(), "b", ("x", "y")))
    assert _identity(declared) == _identity(Declared(this_output_path(), "a", ("x", "y"), workers=8))


def test_step_references_inside_a_versioned_field_stay_dependencies():
    a = ExecutorStep("a", write_text, Declared(this_output_path(), "a"))
    b = ExecutorStep("b", write_text, Declared(this_output_path(), "b", (output_path_of(a), "/fixed/path")))
    plan = build_plan([b], "/p")
    by = {s.name: s for s in plan.steps}
    assert by["b"].dependencies == [by["a"]]
    assert by["b"].version["config"]["inputs[1]"] == "/fixed/path"
    assert plan.resolve_config(by["b"]).inputs == (by["a"].output_path, "/fixed/path")


def test_a_bad_value_in_a_versioned_field_names_the_field():
    with pytest.raises(EncodingError, match="field 'inputs\\[0\\]' is a function"):
        _identity(Declared(this_output_path(), "a", (lambda: 1,)))


def test_helpers_pass_values_through_and_knobs_do_not_move_identities():
    raw = default_download("docs", source="/data/html", revision="1.0")
    docs = default_extract("docs", raw, num_workers=4)
    tok = default_train_tokenizer("docs", docs, vocab_size=300)
    cache = default_tokenize("docs", docs, tok)
    for step in (raw, docs, tok, cache):
        fields = scan_config(step.config, step_label=step.name)
        assert not any(
            isinstance(getattr(step.config, f.name), VersionedValue) for f in dataclasses.fields(step.config)
        ), step.name
        assert fields.versioned, step.name
    faster = default_tokenize("docs", default_extract("docs", raw, num_workers=1), tok, num_workers=8)
    ids = [s.identity for s in build_plan([cache], "/p").steps]
    assert ids == [s.identity for s in build_plan([faster], "/p").steps]
    other = default_tokenize("docs", docs, tok, validation_fraction=0.5)
    assert build_plan([other], "/p").steps[-1].identity != ids[-1]


def test_tokenize_a_hugging_face_dataset_downloads_it_first():
    step = default_tokenize("roneneldan/TinyStories", "roneneldan/TinyStories", "gpt2")
    plan = build_plan([step], "/p")
    raw = next(s for s in plan.steps if s.name == "raw/roneneldan/TinyStories")
    assert raw.step.config.hf_dataset == "roneneldan/TinyStories" and raw.step.config.revision == "main"
    assert raw.step.config.include == ("*.parquet",)
    assert plan.resolve_config(plan.steps[-1]).input_path == f"{raw.output_path}/data"


def _tokenizer_file(tmp_path, vocab: int) -> str:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(
        [f"word{i} other{i * 7}" for i in range(400)],
        trainers.BpeTrainer(
            vocab_size=vocab, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    return str(path)


def _train_config(**kw) -> SimpleTrainConfig:
    return SimpleTrainConfig(
        resources=CpuOnlyConfig(num_cpus=1), train_batch_size=4, num_train_steps=10, learning_rate=1e-3, **kw
    )


def test_model_takes_the_tokenizer_vocabulary_at_plan_time(tmp_path):
    docs = default_extract("docs", default_download("docs", source="/data/html"))
    trained = default_tokenize("own", docs, default_train_tokenizer("docs", docs, vocab_size=700))
    assert default_train("a", trained, llama_nano, _train_config()).config.model.vocab_size == 700
    hub_like = default_tokenize("file", docs, _tokenizer_file(tmp_path, 320))
    step = default_train("b", hub_like, llama_nano, _train_config())
    assert step.config.model.vocab_size == Tokenizer.from_file(str(tmp_path / "tokenizer.json")).get_vocab_size()
    with pytest.raises(StepDefinitionError, match=r"model_config.vocab_size=256 but the tokenizer has 700 tokens"):
        default_train("c", trained, dataclasses.replace(llama_nano, vocab_size=256), _train_config())


def test_simple_train_config_maps_to_the_trainer():
    docs = default_extract("docs", default_download("docs", source="/data/html"))
    cache = default_tokenize("own", docs, default_train_tokenizer("docs", docs, vocab_size=700))
    cpu = default_train("cpu", cache, llama_nano, _train_config(weight_decay=0.05, lr_schedule="cosine"), tags=["t"])
    assert cpu.resources == {"num_cpus": 1} and cpu.config.compute_dtype == "float32"
    assert cpu.config.optimizer.weight_decay == 0.05 and cpu.config.optimizer.schedule == "cosine"
    assert cpu.config.seq_len == llama_nano.max_seq_len and cpu.config.wandb.tags == ("t", "cpu")
    tpu = default_train(
        "tpu", cache, llama_nano, dataclasses.replace(_train_config(), resources=TpuPodConfig("v4-8", 2))
    )
    assert tpu.resources.tpu == "v4-8" and tpu.config.tpu_slices == 2 and tpu.config.compute_dtype == "bfloat16"
    with pytest.raises(ValueError, match="either optimizer_config or beta2"):
        _train_config(optimizer_config=OptimizerConfig(), beta2=0.9)
    with pytest.raises(StepDefinitionError, match="eval_harness_tasks"):
        default_train("x", cache, llama_nano, _train_config(), eval_harness_tasks=["hellaswag:ten"])
    with pytest.raises(StepDefinitionError, match="default_eval\\('cpu'\\): task 'piqa:0:x'"):
        default_eval("cpu", cpu, cache, tasks=("piqa:0:x",))
    evaluation = default_eval("cpu", cpu, cache, seq_len=128)
    assert evaluation.config.seq_len == 128 and evaluation.config.tasks == CORE_TASKS
    assert evaluation.config.tasks[:2] == ("arc_easy:10", "arc_challenge:10")


def test_marin_data_configs_become_weights_and_validation_sets():
    docs = default_extract("docs", default_download("docs", source="/data/html"))
    tok = default_train_tokenizer("docs", docs, vocab_size=700)
    web, code, held = (default_tokenize(n, docs, tok) for n in ("web", "code", "held"))
    mixture = lm_mixture_data_config({"web": web, "code": code, "held": held}, {"web": 0.7, "code": 0.3})
    step = default_train("mix", mixture, llama_nano, _train_config())
    assert set(step.config.data.caches) == {"web", "code"} and step.config.data.weights == {"web": 0.7, "code": 0.3}
    assert set(step.config.eval_caches) == {"held"} and step.config.model.vocab_size == 700
    single = default_train("one", lm_data_config(web, validation_sets={"held": held}), llama_nano, _train_config())
    assert set(single.config.data.caches) == {"web"} and set(single.config.eval_caches) == {"held"}
    with pytest.raises(StepDefinitionError, match="components without a weight: \\['held'\\]"):
        lm_mixture_data_config({"web": web, "held": held}, {"web": 1.0}, missing_weights_are_validation=False)
    with pytest.raises(StepDefinitionError, match="shuffle=False is not supported"):
        lm_data_config(web, shuffle=False)
    other = default_tokenize("other", docs, default_train_tokenizer("small", docs, vocab_size=500))
    with pytest.raises(StepDefinitionError, match="tokenizers of different sizes"):
        default_train("bad", lm_data_config(web, validation_sets={"other": other}), llama_nano, _train_config())


def test_simple_train_config_holds_one_optimizer_config_and_takes_marins_flat_spelling():
    flat = _train_config(weight_decay=0.05, lr_schedule="cosine", warmup=0.1, beta2=None)
    assert flat.optimizer == OptimizerConfig(learning_rate=1e-3, weight_decay=0.05, schedule="cosine", warmup=0.1)
    assert (flat.learning_rate, flat.lr_schedule, flat.beta2) == (1e-3, "cosine", 0.95)  # reads the optimizer
    native = SimpleTrainConfig(
        resources=CpuOnlyConfig(num_cpus=1),
        train_batch_size=4,
        num_train_steps=10,
        optimizer=OptimizerConfig(learning_rate=1e-3, weight_decay=0.05, schedule="cosine", warmup=0.1),
    )
    assert native == flat
    # Marin's optimizer_config is used as it is; the learning rate given beside it is Marin's required field.
    whole = OptimizerConfig(learning_rate=2e-3, schedule="constant")
    assert _train_config(optimizer_config=whole).optimizer is whole
    # Flat keywords adjust a given optimizer (as dataclasses.replace passes them).
    assert dataclasses.replace(flat, learning_rate=3e-3).optimizer == dataclasses.replace(
        flat.optimizer, learning_rate=3e-3
    )
    assert dataclasses.replace(flat, num_train_steps=20).optimizer is flat.optimizer
    with pytest.raises(TypeError, match="give learning_rate"):
        SimpleTrainConfig(resources=CpuOnlyConfig(), train_batch_size=4, num_train_steps=10)
    with pytest.raises(TypeError, match=r"SimpleTrainConfig has no field 'ema_beta' \(its fields are: resources, "):
        _train_config(ema_beta=0.995)
    with pytest.raises(TypeError, match="optimizer or optimizer_config"):
        _train_config(optimizer=whole, optimizer_config=whole)


def test_flat_and_native_optimizer_spellings_plan_the_same_identity():
    docs = default_extract("docs", default_download("docs", source="/data/html"))
    cache = default_tokenize("own", docs, default_train_tokenizer("docs", docs, vocab_size=700))
    flat = default_train("same", cache, llama_nano, _train_config(weight_decay=0.05, min_lr_ratio=0.0))
    native = default_train(
        "same",
        cache,
        llama_nano,
        SimpleTrainConfig(
            CpuOnlyConfig(num_cpus=1),
            4,
            10,
            optimizer=OptimizerConfig(learning_rate=1e-3, weight_decay=0.05, min_lr_ratio=0.0),
        ),
    )
    other = default_train("same", cache, llama_nano, _train_config(weight_decay=0.06, min_lr_ratio=0.0))
    paths = [build_plan([s], "/p").roots[0].output_path for s in (flat, native, other)]
    assert paths[0] == paths[1] != paths[2]
