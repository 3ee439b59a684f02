"""Recipe helpers: each `default_*` names a step and wires its inputs, as Marin's defaults.py does.

What enters a step's identity is declared once, on its config class (`versioned_field`): the
source, the extraction method, the tokenizer, the model shape and the optimizer are part of it;
worker counts and batch sizes for I/O are not, so turning them reruns nothing. A helper therefore
passes values through as they are. Inputs are steps (documents live under their `data/`),
`output_path_of(...)` references, paths or Hugging Face dataset ids. A local path enters the
identity as the content digest of its files, never as the path (execution/plan/sources.py), so the
same corpus in another folder or on another machine is the same step; a package source
(`debian://...`, `pypi://...`) enters as written and is fetched by the step when it runs.

    raw = default_download("python-docs", source="debian://python3.11-doc/usr/share/doc/python3.11/html")
    docs = default_extract("python-docs", raw)
    tokenized = default_tokenize("python-docs", docs, tokenizer=default_train_tokenizer("python-docs", docs))
    model = default_train("nano", tokenized, llama_nano, SimpleTrainConfig(resources=CpuOnlyConfig(), ...))
    evaluation = default_eval("nano", model, tokenized)

Options not named in a helper's signature go to its config class (e.g. `num_workers=8`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from experiments.simple_train_config import SimpleTrainConfig
from marin_lab.evaluation import CORE_TASKS, EvalLmConfig, EvaluationError, evaluate_lm, parse_task
from marin_lab.evaluation.task_items import TaskItemsConfig, export_task_items
from marin_lab.execution import (
    ExecutorStep,
    InputName,
    StepDefinitionError,
    output_path_of,
    this_output_path,
    unwrap_versioned_value,
)
from marin_lab.execution.plan.sources import versioned_source
from marin_lab.main.train_lm import train_lm
from marin_lab.processing.classify import (
    ClassifyFilterConfig,
    TrainClassifierConfig,
    classify_filter,
    train_quality_classifier,
)
from marin_lab.processing.decontaminate import DecontaminateConfig, decontaminate
from marin_lab.processing.dedup import DedupConfig, dedup_exact, dedup_fuzzy
from marin_lab.processing.download import DownloadConfig, download
from marin_lab.processing.extract import TEXT_PATTERNS, ExtractConfig, extract
from marin_lab.processing.known_tokenizers import how_to_fetch, known_vocab_size
from marin_lab.processing.quality import HeuristicFilterConfig, filter_heuristics
from marin_lab.processing.tokenize import (
    TokenizeConfig,
    TrainTokenizerConfig,
    tokenize,
    train_tokenizer,
)
from marin_lab.processing.tokenizers import load_tokenizer_offline
from marin_lab.training import DataConfig, LlamaConfig, MixturePhase, TrainLmConfig, WandbConfig

logger = logging.getLogger(__name__)

DocumentsInput = ExecutorStep | InputName | str
"""Where a step reads documents: a step (its `data/` folder), an `output_path_of(...)`, or a path."""
TokenizedInput = ExecutorStep | Mapping[str, ExecutorStep]
"""One tokenize step, or dataset name -> tokenize step (a mixture)."""


@dataclasses.dataclass(frozen=True)
class LMMixture:
    """The data of one training run, as Marin's `lm_data_config`/`lm_mixture_data_config` describe it."""

    components: Mapping[str, ExecutorStep]
    """Dataset name -> tokenize step, trained on."""
    weights: Mapping[str, float]
    """Dataset name -> mixture weight (normalised by the trainer)."""
    validation: Mapping[str, ExecutorStep]
    """Dataset name -> tokenize step, scored every `steps_per_eval` steps, never trained on."""


_HF_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def documents_of(source: DocumentsInput | Sequence[DocumentsInput]) -> Any:
    """The config value for reading documents from `source` (one input or several)."""
    if isinstance(source, ExecutorStep):
        return output_path_of(source, "data")
    if isinstance(source, (InputName, str)):
        return source
    if isinstance(source, Sequence):
        return [documents_of(s) for s in source]
    raise TypeError(f"expected an ExecutorStep, output_path_of(...) or a path, got {type(source).__name__}")


def is_hf_dataset_id(spec: str) -> bool:
    """'org/name' that is not a local path: a Hugging Face dataset repository."""
    return bool(_HF_ID.match(spec)) and not os.path.exists(spec)


# --- data ------------------------------------------------------------------------------------


def default_download(
    name: str,
    *,
    source: str | None = None,
    hf_dataset: str | None = None,
    revision: str | None = None,
    include: Sequence[str] | None = None,
    package: str | None = None,
    **options: Any,
) -> ExecutorStep:
    """Fetch raw files (a package source, an fsspec URL/folder/glob, or a Hugging Face dataset at
    `revision`) -> `raw/{name}`.

    `package` ('name@version') declares what a local `source` is, so its identity is the package
    and its files are not read at plan time; otherwise a local source is identified by its content.
    """
    if package is not None:
        source = versioned_source(source, package=package)
    return ExecutorStep(
        name=f"raw/{name}",
        fn=download,
        config=DownloadConfig(
            output_path=this_output_path(),
            source=source,
            hf_dataset=hf_dataset,
            revision=revision,
            include=tuple(include) if include else None,
            **options,
        ),
        description=f"download {hf_dataset or source}" + (f" @ {revision}" if revision else ""),
    )


def default_extract(name: str, html: DocumentsInput, **options: Any) -> ExecutorStep:
    """HTML -> documents with resiliparse (or `method="trafilatura"`) -> `documents/{name}`."""
    config = ExtractConfig(input_path=documents_of(html), output_path=this_output_path(), **{"source": name, **options})
    return ExecutorStep(
        name=f"documents/{name}", fn=extract, config=config, description=f"extract text from HTML with {config.method}"
    )


def default_text_documents(name: str, source: str, **options: Any) -> ExecutorStep:
    """A folder (or URL) of plain text files -> `documents/{name}`: each .txt/.md/.rst file one
    document as it is, each .html page through resiliparse (download, then extract with method='text')."""
    raw = default_download(name, source=source)
    return default_extract(name, raw, **{"method": "text", "patterns": TEXT_PATTERNS, "num_shards": 1, **options})


def default_train_tokenizer(
    name: str, documents: DocumentsInput | Sequence[DocumentsInput], **options: Any
) -> ExecutorStep:
    """A byte-level BPE trained on a deterministic sample of `documents` -> `tokenizers/{name}`."""
    config = TrainTokenizerConfig(input_path=documents_of(documents), output_path=this_output_path(), **options)
    return ExecutorStep(
        name=f"tokenizers/{name}",
        fn=train_tokenizer,
        config=config,
        description=f"train a byte-level BPE tokenizer, vocabulary {config.vocab_size}",
    )


def default_tokenize(
    name: str,
    dataset: DocumentsInput | Sequence[DocumentsInput],
    tokenizer: str | ExecutorStep,
    *,
    revision: str | None = None,
    include: Sequence[str] = ("*.parquet",),
    **options: Any,
) -> ExecutorStep:
    """Documents -> the token cache the trainer reads -> `tokenized/{name}`.

    `dataset` is a step, a path, or a Hugging Face dataset id: then its files matching `include`
    (Parquet by default) are downloaded first, at `revision` (pin a commit sha: unpinned, "main"
    is fetched and the step is reused even after the dataset changes upstream). `tokenizer` is a
    `default_train_tokenizer` step, a tokenizer.json path or folder, or a hub model id.
    """
    if isinstance(dataset, str) and is_hf_dataset_id(dataset):
        if revision is None:
            logger.warning(
                "default_tokenize(%r): dataset %r is not pinned to a revision; fetching 'main'. "
                "Pass revision=<commit sha> to make the step reproducible",
                name,
                dataset,
            )
        dataset = default_download(dataset, hf_dataset=dataset, revision=revision or "main", include=include)
    tok = output_path_of(tokenizer) if isinstance(tokenizer, ExecutorStep) else tokenizer
    return ExecutorStep(
        name=f"tokenized/{name}",
        fn=tokenize,
        config=TokenizeConfig(
            input_path=documents_of(dataset), output_path=this_output_path(), tokenizer=tok, **options
        ),
        description="tokenize documents into a token cache",
    )


def default_exact_dedup(name: str, documents: DocumentsInput, **options: Any) -> ExecutorStep:
    """Drop documents (and, with `paragraph_level=True`, lines) seen earlier in the corpus -> `dedup-exact/{name}`."""
    return ExecutorStep(
        name=f"dedup-exact/{name}",
        fn=dedup_exact,
        description="exact dedup",
        config=DedupConfig(input_path=documents_of(documents), output_path=this_output_path(), **options),
    )


def default_fuzzy_dedup(name: str, documents: DocumentsInput, **options: Any) -> ExecutorStep:
    """MinHash-LSH near-duplicate removal across all shards (5-word shingles, 112 permutations) -> `dedup/{name}`."""
    config = DedupConfig(input_path=documents_of(documents), output_path=this_output_path(), **options)
    return ExecutorStep(
        name=f"dedup/{name}",
        fn=dedup_fuzzy,
        config=config,
        description=f"fuzzy dedup, MinHash {config.num_bands}x{config.rows_per_band} "
        f"on {config.ngram_size}-word shingles",
    )


def default_quality_filter(name: str, documents: DocumentsInput, **options: Any) -> ExecutorStep:
    """Gopher/C4/FineWeb heuristic rules (`rules=QualityRules(...)`), each removal tagged -> `quality/{name}`."""
    return ExecutorStep(
        name=f"quality/{name}",
        fn=filter_heuristics,
        description="heuristic quality filter",
        config=HeuristicFilterConfig(input_path=documents_of(documents), output_path=this_output_path(), **options),
    )


def default_decontaminate(
    name: str, documents: DocumentsInput, tasks: Sequence[str], *, data: str = "offline", **options: Any
) -> ExecutorStep:
    """The documents that hold items of the lm-eval `tasks` (13-gram overlap on a word stream), reported per
    task and document, and the documents without them -> `decontaminated/{name}`; the items, read as the
    evaluation reads them (`data`), are the step `task-items/{name}`."""
    if isinstance(tasks, str) or not tasks:
        raise StepDefinitionError(f"default_decontaminate('{name}'): tasks must be a list of lm-eval task names")
    items = ExecutorStep(
        name=f"task-items/{name}",
        fn=export_task_items,
        config=TaskItemsConfig(tasks=tuple(tasks), output_path=this_output_path(), data=data),
        description=f"the items of {len(tasks)} evaluation task(s) as text",
    )
    return ExecutorStep(
        name=f"decontaminated/{name}",
        fn=decontaminate,
        description="n-gram overlap with evaluation items",
        config=DecontaminateConfig(
            input_path=documents_of(documents),
            items_path=output_path_of(items),
            output_path=this_output_path(),
            **options,
        ),
    )


def default_train_quality_classifier(
    name: str,
    positive: DocumentsInput | Sequence[DocumentsInput],
    negative: DocumentsInput | Sequence[DocumentsInput],
    **options: Any,
) -> ExecutorStep:
    """A fastText classifier, positive vs negative documents -> `classifiers/{name}/model.bin`."""

    def paths(sources: Any) -> tuple:
        out = documents_of(sources)
        return tuple(out) if isinstance(out, list) else (out,)

    return ExecutorStep(
        name=f"classifiers/{name}",
        fn=train_quality_classifier,
        description="train a fastText quality classifier",
        config=TrainClassifierConfig(
            positive_paths=paths(positive), negative_paths=paths(negative), output_path=this_output_path(), **options
        ),
    )


def default_classify_filter(
    name: str, documents: DocumentsInput, model: ExecutorStep | str, **options: Any
) -> ExecutorStep:
    """Keep documents a fastText model scores >= `threshold` for `label` -> `classified/{name}`.

    `model` is a `default_train_quality_classifier` step or a model file path (e.g. lid.176.ftz).
    """
    model_path = output_path_of(model, "model.bin") if isinstance(model, ExecutorStep) else model
    config = ClassifyFilterConfig(
        input_path=documents_of(documents), output_path=this_output_path(), model_path=model_path, **options
    )
    return ExecutorStep(
        name=f"classified/{name}",
        fn=classify_filter,
        config=config,
        description=f"fastText filter: {config.label} >= {config.threshold}",
    )


def default_language_filter(
    name: str,
    documents: DocumentsInput,
    lid_model: str,
    *,
    language: str = "en",
    threshold: float = 0.65,
    **options: Any,
) -> ExecutorStep:
    """Keep documents in `language` per fastText's lid.176 (FineWeb: en >= 0.65) -> `classified/{name}`."""
    return default_classify_filter(
        name,
        documents,
        lid_model,
        label=f"__label__{language}",
        threshold=threshold,
        attribute="language",
        rule="language",
        **options,
    )


# --- training and evaluation -----------------------------------------------------------------


def lm_mixture_data_config(
    components: Mapping[str, ExecutorStep],
    weights: Mapping[str, float],
    *,
    shuffle: bool = True,
    missing_weights_are_validation: bool = True,
    include_raw_paths: bool = True,
) -> LMMixture:
    """Marin's mixture of tokenized datasets, for `default_train(name, tokenized=<this>, ...)`.

    A component with no weight (or weight 0) is a validation set when `missing_weights_are_validation`.
    Sequences are always shuffled (a Feistel permutation per dataset), so `shuffle` must stay True;
    `include_raw_paths` only concerned Marin's logging.
    """
    del include_raw_paths
    if shuffle is not True:
        raise StepDefinitionError(
            f"lm_mixture_data_config: shuffle={shuffle!r} is not supported; marin_lab always "
            "shuffles with a Feistel permutation per dataset (leave shuffle=True)"
        )
    unknown = sorted(set(weights) - set(components))
    if unknown:
        raise StepDefinitionError(f"lm_mixture_data_config: weights name datasets that are not components: {unknown}")
    unweighted = sorted(k for k in components if not weights.get(k))
    if unweighted and not missing_weights_are_validation:
        raise StepDefinitionError(
            f"lm_mixture_data_config: components without a weight: {unweighted}; give each a "
            "weight or pass missing_weights_are_validation=True"
        )
    train = {k: v for k, v in components.items() if weights.get(k)}
    if not train:
        raise StepDefinitionError("lm_mixture_data_config: no component has a positive weight")
    return LMMixture(
        components=train,
        weights={k: float(weights[k]) for k in train},
        validation={k: components[k] for k in unweighted},
    )


def lm_data_config(
    training_set: ExecutorStep, validation_sets: Mapping[str, ExecutorStep] | None = None, *, shuffle: bool = True
) -> LMMixture:
    """Marin's one-dataset data config: `training_set` (named after its step) plus validation-only sets."""
    name = training_set.name.rsplit("/", 1)[-1]
    return lm_mixture_data_config({name: training_set, **(validation_sets or {})}, {name: 1.0}, shuffle=shuffle)


def _steps(tokenized: TokenizedInput) -> dict[str, ExecutorStep]:
    if isinstance(tokenized, ExecutorStep):
        return {tokenized.name.rsplit("/", 1)[-1]: tokenized}
    return dict(tokenized)


def _caches(tokenized: TokenizedInput) -> dict[str, Any]:
    return {name: output_path_of(step) for name, step in _steps(tokenized).items()}


def tokenizer_vocab_size(tokenized: TokenizedInput) -> int | None:
    """The vocabulary the data was (or will be) tokenized with, as far as it is known without the
    network (a trained tokenizer step's size, a local tokenizer file, a hub tokenizer already in the
    cache, a well-known hub tokenizer: marin_lab.processing.known_tokenizers); None otherwise: a plan
    never downloads, and train_lm checks the token caches' vocabulary against the model when it runs."""
    steps = [tokenized] if isinstance(tokenized, ExecutorStep) else list(tokenized.values())
    sizes: dict[int, str] = {}
    for step in steps:
        spec = getattr(step.config, "tokenizer", None)
        if isinstance(spec, InputName) and spec.step is not None:  # a train_tokenizer step
            size, what = unwrap_versioned_value(getattr(spec.step.config, "vocab_size", None)), spec.step.name
        elif isinstance(spec, str):
            size, what = _known_vocab_size(spec, unwrap_versioned_value(step.config.tokenizer_revision)), spec
        else:
            return None
        if size is None:
            return None
        sizes.setdefault(size, what)
    if len(sizes) > 1:
        raise StepDefinitionError(
            f"the datasets of one training run use tokenizers of different sizes ({sizes}); tokenize every "
            "dataset of a mixture with the same tokenizer"
        )
    return next(iter(sizes), None)


def _known_vocab_size(spec: str, revision: str | None) -> int | None:
    try:
        tokenizer = load_tokenizer_offline(spec, revision)
    except Exception as err:  # a damaged local file: the trainer checks again when it runs
        logger.warning(
            "tokenizer %r cannot be read now (%s); its vocabulary is checked when training starts", spec, err
        )
        return None
    if tokenizer is None:  # not on disk: a well-known hub tokenizer's size is known all the same
        return known_vocab_size(spec, revision)
    return tokenizer.get_vocab_size(with_added_tokens=True)


def _fetch_hint(tokenized: TokenizedInput) -> str:
    specs = [unwrap_versioned_value(getattr(s.config, "tokenizer", None)) for s in _steps(tokenized).values()]
    names = sorted({s for s in specs if isinstance(s, str)})
    return f" (`{how_to_fetch(names[0])}`)" if names else ""


def _model_for(name: str, model: LlamaConfig, tokenized: TokenizedInput) -> LlamaConfig:
    """`model` with the tokenizer's vocabulary when it has none; a model too small for it is an error."""
    vocab = tokenizer_vocab_size(tokenized)
    if model.vocab_size is None:
        if vocab is None:
            raise StepDefinitionError(
                f"default_train('{name}'): the model has no vocab_size and the tokenizer's is not known without "
                f"downloading it (plans never download); set model_config's vocab_size, or fetch the tokenizer "
                f"once{_fetch_hint(tokenized)}"
            )
        return dataclasses.replace(model, vocab_size=vocab)
    if vocab is not None and vocab > model.vocab_size:
        raise StepDefinitionError(
            f"default_train('{name}'): model_config.vocab_size={model.vocab_size} but the tokenizer has {vocab} "
            f"tokens; use vocab_size={vocab} (or None, to take the tokenizer's)"
        )
    return model


def default_train(
    name: str,
    tokenized: TokenizedInput | LMMixture,
    model_config: LlamaConfig,
    train_config: SimpleTrainConfig,
    tags: Sequence[str] = (),
    use_default_validation: bool = True,
    eval_harness_tasks: Sequence[str] = (),
    validation_sets: Mapping[str, ExecutorStep] | None = None,
    *,
    weights: Mapping[str, float] | None = None,
    phases: Sequence[MixturePhase] = (),
    wandb: WandbConfig | None = None,
    description: str | None = None,
    steps_per_task_eval: int | None = None,
    eval_task_limit: int | None = 100,
) -> ExecutorStep:
    """A `train_lm` step (with evaluation during training) on `tokenized` -> `checkpoints/{name}`.

    `tokenized` is one tokenize step, name -> step with mixture `weights`, or an `lm_mixture_data_config`.

    The model takes the tokenizer's vocabulary unless it names one (then it must cover it). Every
    `steps_per_eval` steps the validation splits of the training data and of `validation_sets` are
    scored; `eval_harness_tasks` (lm-eval tasks as `name[:num_fewshot[:limit]]`, e.g. CORE_TASKS,
    at most `eval_task_limit` items each) every `steps_per_task_eval` steps and at the end (only at
    the end when that is None), logged as eval/<task>/<metric>.
    `use_default_validation` is accepted for Marin's files: marin_lab has no built-in validation
    corpora (docs/coming_from_marin.md).
    """
    del use_default_validation
    if isinstance(tokenized, LMMixture):
        if weights is not None:
            raise StepDefinitionError(f"default_train('{name}'): the mixture already has weights; drop weights=")
        mixture = tokenized
        tokenized, weights, validation_sets = (
            dict(mixture.components),
            mixture.weights,
            {**mixture.validation, **(validation_sets or {})},
        )
    model = _model_for(name, unwrap_versioned_value(model_config), _steps(tokenized) | dict(validation_sets or {}))
    for task in eval_harness_tasks:
        try:
            parse_task(task)
        except EvaluationError as err:
            raise StepDefinitionError(f"default_train('{name}'): eval_harness_tasks: {err}") from err
    resources, tpu_type, tpu_slices = train_config.step_resources()
    start = train_config.initialize_from_checkpoint_path
    seq_len = train_config.train_seq_len or model.max_seq_len
    config = TrainLmConfig(
        output_path=this_output_path(),
        data=DataConfig(
            caches=_caches(tokenized),
            weights=dict(weights) if weights is not None else None,
            phases=tuple(phases),
            seed=train_config.data_seed or 0,
        ),
        model=model,
        optimizer=train_config.optimizer,
        num_train_steps=train_config.num_train_steps,
        batch_size=train_config.train_batch_size,
        seq_len=seq_len,
        seed=train_config.seed,
        compute_dtype=train_config.resolved_compute_dtype(),
        z_loss_weight=train_config.z_loss_weight or 0.0,
        initialize_from=output_path_of(start, "checkpoints") if isinstance(start, ExecutorStep) else start,
        microbatches=train_config.microbatches,
        mesh=train_config.mesh,
        gradient_checkpointing=train_config.gradient_checkpointing,
        checkpoint=train_config.checkpoints(),
        attention_impl=train_config.resolved_attention_impl(),
        steps_per_eval=train_config.steps_per_eval or 1000,
        max_eval_batches=train_config.max_eval_batches,
        eval_caches=_caches(validation_sets) if validation_sets else {},
        eval_tasks=tuple(eval_harness_tasks),
        steps_per_task_eval=steps_per_task_eval,
        eval_task_limit=eval_task_limit,
        wandb=dataclasses.replace(wandb or WandbConfig(), tags=tuple(tags) + (name,)),
        tpu_type=tpu_type,
        tpu_slices=tpu_slices,
    )
    return ExecutorStep(
        name=f"checkpoints/{name}",
        fn=train_lm,
        config=config,
        resources=resources,
        description=description
        or f"train a {model.num_params() / 1e6:,.1f}M-parameter model, "
        f"{config.num_train_steps} steps x {config.batch_size} x {seq_len} tokens",
    )


def default_eval(
    name: str,
    trained: ExecutorStep,
    tokenized: TokenizedInput,
    *,
    tasks: Sequence[str] = CORE_TASKS,
    resources: Any = None,
    **options: Any,
) -> ExecutorStep:
    """An `evaluate_lm` step on every validation split of `tokenized`, and the lm-eval `tasks`
    (`name[:num_fewshot[:limit]]`; `limit=N` caps every task) -> `evaluation/{name}`."""
    for task in tasks:
        try:
            parse_task(task)
        except EvaluationError as err:
            raise StepDefinitionError(f"default_eval('{name}'): {err}") from err
    return ExecutorStep(
        name=f"evaluation/{name}",
        fn=evaluate_lm,
        resources=resources,
        config=EvalLmConfig(
            checkpoint_path=output_path_of(trained),
            output_path=this_output_path(),
            caches=_caches(tokenized),
            tasks=tuple(tasks),
            **options,
        ),
        description="perplexity, bits-per-byte and lm-eval tasks",
    )
