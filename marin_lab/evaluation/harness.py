"""lm-evaluation-harness on our JAX Llama: an lm-eval model (`MarinLM`) and the task runner.

`MarinLM` implements lm-eval's model interface (`loglikelihood`, `loglikelihood_rolling`,
`generate_until`) on parameters of ours. Tokenization follows lm-eval's `hf` backend exactly: a
context's trailing spaces move to the continuation, context + continuation are encoded together
and the continuation's tokens are cut from the joint encoding, an empty context is the prefix
token (BOS, else EOS), and a sequence longer than the model's context keeps its last
max_length + 1 tokens (truncated from the left; counted in `truncated`). Requests are sorted by
length and scored `batch_size` at a time, each batch right-padded to a length bucket (four
per power of two: `scoring.bucket_length`), so a task compiles a handful of programs whatever its lengths; a
batch's padding rows are zeros and never read. Results do not depend on batch composition.

Given a `mesh` (the training mesh, parameters sharded over every host), every process runs the
same requests through the same batches: lm-eval sees one rank on each process (it splits no
requests), the batches are a function of the requests' tokens alone (sorted by length, then
content), so all processes call the collective forward pass in lockstep with the same shapes, and
each reads every row of the replicated result. Only the caller's process 0 writes anything.

`run_tasks` runs lm-eval's own task definitions (YAML, few-shot sampling, metrics) by name,
one task at a time so that a task that fails is reported and the others still run. Documents
come from the hub when `data="hub"`, from the pinned offline copy (`offline_data`) when
`data="offline"`, and from the offline copy where it has them, else the hub, when `data="auto"`.
The offline copy is hooked in at the one place lm-eval loads documents, `ConfigurableTask.download`
(the method lm-eval documents as the override point for a custom source): while tasks are built,
a task whose (dataset_path, dataset_name) has a local copy gets that `DatasetDict`, and its split
fields name the splits the copy holds. Prompts, few-shot format and metrics are untouched. Where the
copy lacks the task's default split, the split it has is scored; where it lacks the few-shot split,
few-shot examples come from the scored split with the scored document excluded (lm-eval's rule when
the two coincide). Both are recorded per task (`split`, `default_split`, `fewshot_split`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import functools
import logging
import math
import os
import random
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from jax.sharding import Mesh
from lm_eval.api.model import TemplateLM  # noqa: E402
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window  # noqa: E402

from marin_lab.errors import MarinLabError
from marin_lab.evaluation import offline_data
from marin_lab.evaluation.scoring import batch_rows, bucket_length, host_array, place_batch, scorer
from marin_lab.execution.run.logs import VERBOSE_ENV, quiet_libraries
from marin_lab.models.generate import SamplingConfig, generate_text
from marin_lab.models.llama import LlamaConfig, Params
from marin_lab.processing.errors import TokenizeError
from marin_lab.processing.tokenizers import EOS_CANDIDATES, find_eos_id

logger = logging.getLogger(__name__)

BOS_CANDIDATES = ("<|begin_of_text|>", "<s>", "<bos>")


class HarnessError(MarinLabError, ValueError):
    """A task cannot be resolved, loaded or scored."""


def _first_token_id(tokenizer: Any, names: Sequence[str]) -> int | None:
    for name in names:
        token_id = tokenizer.token_to_id(name)
        if token_id is not None:
            return int(token_id)
    return None


class MarinLM(TemplateLM):
    """lm-eval's model interface on our Llama parameters and an HF `tokenizers.Tokenizer`."""

    backend = "causal"

    def __init__(
        self,
        params: Params,
        config: LlamaConfig,
        tokenizer: Any,
        *,
        batch_size: int = 8,
        compute_dtype: str = "float32",
        max_length: int | None = None,
        eos_id: int | None = None,
        bos_id: int | None = None,
        max_gen_toks: int = 256,
        mesh: Mesh | None = None,
    ) -> None:
        """`mesh`: the mesh `params` are sharded on (scoring runs there, on every process of a
        multi-process run, `batch_size` rounded up to split evenly over its batch axes); None: the
        parameters' own device."""
        super().__init__()
        self.params = params
        self.config = config
        self.tokenizer = tokenizer
        self.mesh = mesh
        self._batch_size = batch_rows(int(batch_size), mesh)
        self.compute_dtype = compute_dtype
        self._max_length = int(max_length or config.max_seq_len)
        if self._max_length > config.max_seq_len:
            raise HarnessError(
                f"max_length={self._max_length} is larger than the model's max_seq_len={config.max_seq_len}"
            )
        try:  # the end-of-text token the tokenize steps and the hf/ export take
            self._eos_id = eos_id if eos_id is not None else find_eos_id(tokenizer, None)
        except TokenizeError as err:
            raise HarnessError(f"the tokenizer has no end-of-text token among {list(EOS_CANDIDATES)}") from err
        self._bos_id = bos_id if bos_id is not None else _first_token_id(tokenizer, BOS_CANDIDATES)
        self._max_gen_toks = max_gen_toks
        self.truncated = 0
        """Requests whose prompt was cut from the left to fit the context (since the last reset)."""
        self.programs: set[tuple[str, int, int]] = set()
        """(kind, batch, length) shapes run: one compiled program each."""

    # --- lm-eval's TemplateLM hooks -------------------------------------------------------------
    @property
    def eot_token_id(self) -> int:
        return self._eos_id

    @property
    def prefix_token_id(self) -> int:
        return self._bos_id if self._bos_id is not None else self._eos_id

    @property
    def max_length(self) -> int:
        return self._max_length

    @property
    def max_gen_toks(self) -> int:
        return self._max_gen_toks

    @property
    def batch_size(self) -> int:
        return self._batch_size

    @property
    def tokenizer_name(self) -> str:
        return "marin_lab"

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs: Any) -> list[int]:
        special = True if add_special_tokens is None else add_special_tokens
        if add_special_tokens is None and self._bos_id is not None:
            bos = self.tokenizer.id_to_token(self._bos_id)
            if bos and string.startswith(bos):
                special = False
        ids = list(self.tokenizer.encode(string, add_special_tokens=special).ids)
        return ids

    def tok_decode(self, tokens: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(tokens), skip_special_tokens=False))

    # --- scoring ----------------------------------------------------------------------------------
    def _score_sequences(self, seqs: list[list[int]]) -> list[tuple[np.ndarray, np.ndarray]]:
        """(log p(tok[t+1] | tok[:t+1]), greedy?) per position, for each token sequence."""
        out: list[tuple[np.ndarray, np.ndarray]] = [(np.empty(0), np.empty(0))] * len(seqs)
        order = sorted(range(len(seqs)), key=lambda i: (-len(seqs[i]), seqs[i]))
        fn = scorer(self.config, self.compute_dtype, None, self.mesh)
        bs = self._batch_size
        for lo in range(0, len(order), bs):
            idx = order[lo : lo + bs]
            width = bucket_length(max(len(seqs[i]) for i in idx) - 1, self._max_length) + 1
            batch = np.zeros((bs, width), np.int32)
            for row, i in enumerate(idx):
                batch[row, : len(seqs[i])] = seqs[i]
            self.programs.add(("score", bs, width))
            logp, greedy = fn(self.params, place_batch(batch, self.mesh))
            logp, greedy = host_array(logp), host_array(greedy)
            for row, i in enumerate(idx):
                n = len(seqs[i]) - 1
                out[i] = (logp[row, :n], greedy[row, :n])
        return out

    def _loglikelihood_tokens(
        self, requests: list[tuple[Any, list[int], list[int]]], disable_tqdm: bool = False, **kwargs: Any
    ) -> list[tuple[float, bool]]:
        seqs, conts = [], []
        for _key, context_enc, continuation_enc in requests:
            if not continuation_enc:
                raise HarnessError("a continuation encodes to no tokens with this tokenizer")
            if len(continuation_enc) > self._max_length:
                raise HarnessError(
                    f"a continuation of {len(continuation_enc)} tokens is longer than the "
                    f"model's context ({self._max_length})"
                )
            whole = context_enc + continuation_enc
            if len(whole) > self._max_length + 1:
                self.truncated += 1
                whole = whole[-(self._max_length + 1) :]
            seqs.append(whole)
            conts.append(len(continuation_enc))
        scored = self._score_sequences(seqs)
        res = []
        for (logp, greedy), n in zip(scored, conts, strict=True):
            res.append((float(logp[-n:].sum()), bool(greedy[-n:].all())))
        return res

    def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[float]:
        windows: list[tuple[Any, list[int], list[int]]] = []
        owner: list[int] = []
        for i, req in enumerate(requests):
            (string,) = req.args
            for ctx, cont in map(
                make_disjoint_window,
                get_rolling_token_windows(
                    token_list=self.tok_encode(string),
                    prefix_token=self.prefix_token_id,
                    max_seq_len=self._max_length,
                    context_len=1,
                ),
            ):
                windows.append((None, ctx, cont))
                owner.append(i)
        totals = [0.0] * len(requests)
        for i, (logp, _) in zip(owner, self._loglikelihood_tokens(windows), strict=True):
            totals[i] += logp
        return totals

    def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
        """KV-cache decoding (marin_lab.models.generate), batched over requests with the same settings.

        As lm-eval's hf backend: the prompt keeps its last max_length - max_gen_toks tokens (counted in
        `truncated`), the text is cut at the first of `until` or EOS; `do_sample` false means greedy.
        """
        groups: dict[tuple[Any, ...], list[int]] = {}
        prepared = []
        for i, req in enumerate(requests):
            context, gen_kwargs = req.args
            kwargs = dict(gen_kwargs or {})
            until = kwargs.pop("until", None) or []
            until = [until] if isinstance(until, str) else list(until)
            max_new = int(kwargs.pop("max_gen_toks", self._max_gen_toks))
            max_new = max(1, min(max_new, self._max_length - 1))
            temperature = float(kwargs.pop("temperature", 0.0) or 0.0) if kwargs.pop("do_sample", False) else 0.0
            top_p = float(kwargs.pop("top_p", 1.0) or 1.0)
            prompt = self.tok_encode(context)
            room = self._max_length - max_new
            if len(prompt) > room:
                self.truncated += 1
                prompt = prompt[-room:]
            prepared.append(prompt)
            groups.setdefault((tuple(until), max_new, temperature, top_p), []).append(i)
        out = [""] * len(requests)
        for (until, max_new, temperature, top_p), idx in groups.items():
            sampling = SamplingConfig(
                max_new_tokens=max_new, temperature=temperature, top_p=top_p, stop_token_ids=(self._eos_id,)
            )
            self.programs.add(("generate", self._batch_size, max_new))
            # No mesh here even when scoring has one: the prompts go in as plain arrays, taken as the
            # same on every process, and the sharded parameters' program returns its tokens replicated.
            texts = generate_text(
                self.params,
                self.config,
                self.tokenizer,
                [],
                sampling,
                until=until,
                compute_dtype=self.compute_dtype,
                batch_size=self._batch_size,
                prompt_ids=[prepared[i] for i in idx],
            )
            for i, text in zip(idx, texts, strict=True):
                out[i] = text
        return out


# ---------------------------------------------------------------------------------------------
# Tasks


_MANAGERS: dict[tuple[str, ...], Any] = {}

TASK_FOLDERS: dict[str, str] = {
    **{name: "arc" for name in ("arc_easy", "arc_challenge")},
    "hellaswag": "hellaswag",
    "lambada_openai": "lambada",
    "piqa": "piqa",
    "winogrande": "winogrande",
    "boolq": "super_glue/boolq",
    "copa": "super_glue/copa",
    "cb": "super_glue/cb",
    "commonsense_qa": "commonsense_qa",
    "openbookqa": "openbookqa",
    "wsc273": "wsc273",
    "agieval_lsat_ar": "agieval",
    "gsm8k": "gsm8k",
    "sciq": "sciq",
    "social_iqa": "siqa",
    "rte": "glue/rte",
    "mrpc": "glue/mrpc",
    "sst2": "glue/sst2",
    "mmlu": "mmlu/default",
    **{f"mmlu_{subject}": "mmlu/default" for subject in offline_data.MMLU_SUBJECTS},
}
"""lm-eval's folder (under lm_eval/tasks) of the tasks this project names: indexing only those takes
milliseconds, where lm-eval's whole index (~15k tasks) takes ~15 s (`task_manager` says when it is built)."""


def task_manager(include_path: Sequence[str] = (), names: Sequence[str] | None = None) -> Any:
    """lm-eval's TaskManager for `names`, plus `include_path`; built once per process for each set.

    lm-eval's whole index (every shipped YAML) takes ~15 s to build, so it is built only when needed:
    the shipped folders of the names in TASK_FOLDERS and the user's `include_path` are indexed first,
    and that index is used when every other name is a task (not a group or tag) found there. A user
    group (its members may be shipped tasks), an unknown name or `names=None` take the whole index.
    The user's folders come last either way, so a user task overrides a shipped one of its name."""
    from lm_eval import tasks as lm_eval_tasks

    for path in include_path:
        if not os.path.exists(path):
            raise HarnessError(f"include_path: {path} does not exist")
    if names is not None:
        base = os.path.dirname(lm_eval_tasks.__file__)
        folders = tuple(sorted({os.path.join(base, TASK_FOLDERS[n]) for n in names if n in TASK_FOLDERS}))
        narrow = _manager(folders, include_path, include_defaults=False)
        tasks = set(narrow.all_subtasks)
        if all(n in TASK_FOLDERS or n in tasks for n in names):
            return narrow
    return _manager(("*",), include_path, include_defaults=True)


def _manager(folders: tuple[str, ...], include_path: Sequence[str], *, include_defaults: bool) -> Any:
    from lm_eval import tasks as lm_eval_tasks

    key = folders + tuple(include_path)
    if key not in _MANAGERS:
        paths = [*(() if include_defaults else folders), *include_path]
        _MANAGERS[key] = lm_eval_tasks.TaskManager(include_defaults=include_defaults, include_path=paths or None)
    return _MANAGERS[key]


def check_task_names(names: Sequence[str], include_path: Sequence[str] = ()) -> None:
    """Raises HarnessError naming the closest known tasks for every unknown name."""
    if not include_path and all(n in TASK_FOLDERS for n in names):
        return
    manager = task_manager(include_path, names)
    known = set(manager.all_tasks)
    unknown = [n for n in names if n not in known and not (n.endswith((".yaml", ".yml")) and os.path.exists(n))]
    if unknown:
        parts = []
        for name in unknown:
            close = difflib.get_close_matches(name, sorted(known), n=3, cutoff=0.6)
            parts.append(f"'{name}'" + (f" (closest: {', '.join(close)})" if close else ""))
        raise HarnessError(f"unknown lm-eval task {'; '.join(parts)}; `python -m lm_eval ls tasks` lists them")


LIMIT_MODES = ("sample", "first")
"""How a `limit` picks a task's items: a seeded random sample (its interval estimates the full task),
or the first N in the split's order (lm-eval's `--limit`: a quick look, not an estimate)."""


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """One lm-eval task to run: its name, few-shot count and an optional item cap."""

    name: str
    num_fewshot: int | None = None
    limit: int | None = None
    limit_mode: str = "sample"

    @staticmethod
    def parse(spec: str | TaskSpec | dict[str, Any] | Sequence[Any]) -> TaskSpec:
        if isinstance(spec, TaskSpec):
            return spec
        if isinstance(spec, str):
            return TaskSpec(spec)
        if isinstance(spec, dict):
            return TaskSpec(
                spec["name"] if "name" in spec else spec["task"],
                spec.get("num_fewshot"),
                spec.get("limit"),
                spec.get("limit_mode", "sample"),
            )
        items = list(spec)
        return TaskSpec(items[0], *(items[1:3]))

    @property
    def label(self) -> str:
        return self.name if self.num_fewshot is None else f"{self.name}_{self.num_fewshot}shot"


@contextlib.contextmanager
def _document_source(data: str, record: dict[str, dict[str, Any]]) -> Iterator[None]:
    """While tasks are built, ConfigurableTask.download reads the offline copy where there is one."""
    from lm_eval.api.task import ConfigurableTask

    original = ConfigurableTask.download

    def download(task: Any, dataset_kwargs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        cfg = task.config
        name = cfg.task
        source = offline_data.offline_source(cfg.dataset_path, cfg.dataset_name)
        default_eval = cfg.test_split or cfg.validation_split
        entry = {
            "dataset": cfg.dataset_path,
            "dataset_config": cfg.dataset_name,
            "default_split": default_eval,
            "default_fewshot_split": cfg.fewshot_split or cfg.training_split or cfg.validation_split,
        }
        if data == "hub" or (source is None and data == "auto") or cfg.custom_dataset is not None:
            try:
                original(task, dataset_kwargs, **kwargs)
            except Exception as err:  # noqa: BLE001 - any loader failure becomes the task's one-line reason
                raise HarnessError(_no_documents(name, cfg.dataset_path, cfg.dataset_name, err)) from err
            entry.update(data_source="hub", split=default_eval, fewshot_split=entry["default_fewshot_split"])
            record[name] = entry
            return
        if source is None:
            raise HarnessError(_no_documents(name, cfg.dataset_path, cfg.dataset_name, None))
        task.dataset = source.load()
        held = list(task.dataset)
        split = default_eval if default_eval in held else held[-1]
        fewshot = (
            next(
                (
                    s
                    for s in (cfg.fewshot_split, cfg.training_split, cfg.validation_split)
                    if s is not None and s in held
                ),
                None,
            )
            or split
        )
        cfg.training_split = cfg.training_split if cfg.training_split in held else None
        cfg.validation_split = None
        cfg.test_split = split
        cfg.fewshot_split = fewshot
        task.fewshot_cfg.split = fewshot
        entry.update(data_source=offline_data.DATA_SOURCE, split=split, fewshot_split=fewshot, note=source.note)
        record[name] = entry

    ConfigurableTask.download = download
    try:
        yield
    finally:
        ConfigurableTask.download = original


def _no_documents(task: str, path: str | None, name: str | None, err: Exception | None) -> str:
    where = f"{path}" + (f" ({name})" if name else "")
    reason = f" ({str(err).splitlines()[0][:200]})" if err is not None and str(err) else ""
    return (
        f"task {task}: no documents for {where}: not in the offline copy ({offline_data.DATA_SOURCE}) and "
        f"not loadable from the Hugging Face hub{reason}; run online once with HF_HUB_OFFLINE unset "
        f"(data='hub' or 'auto') so `datasets` caches it, or point HF_DATASETS_CACHE at a cache that holds it"
    )


def _lm_eval_noise(record: logging.LogRecord) -> bool:
    """False for lm-eval's progress chatter: its INFO lines (the step logs' own rule for quiet
    libraries, `execution.logs.quiet_libraries`) and the num_fewshot notice for the shots we set
    ourselves. Its other warnings and errors, and every other logger's records, pass."""
    if not record.name.startswith("lm_eval"):
        return True
    return quiet_libraries(record) and not record.getMessage().startswith("Overwriting default num_fewshot")


@contextlib.contextmanager
def quiet_lm_eval() -> Iterator[None]:
    """While lm-eval runs: its INFO lines and its progress bars (which a step's log file and a Ray
    console show as a line per redraw) kept out, unless `MARIN_LAB_VERBOSE` is set (`--verbose`). The filter sits
    on the handlers (lm-eval logs from child loggers, whose records a logger's own filter never sees)."""
    if os.environ.get(VERBOSE_ENV):
        yield
        return
    handlers = list(logging.getLogger().handlers) + list(logging.getLogger("lm_eval").handlers)
    for handler in handlers:
        handler.addFilter(_lm_eval_noise)
    # lm-eval's bars ("Building contexts", "Tokenizing inputs") pass `disable` themselves or are
    # made where TQDM_DISABLE was read at import: its modules' `tqdm` is swapped for a silent one.
    import lm_eval.api.model
    import lm_eval.api.task

    modules = [m for m in (lm_eval.api.task, lm_eval.api.model) if hasattr(m, "tqdm")]
    saved = [m.tqdm for m in modules]
    for m, bar in zip(modules, saved, strict=True):
        m.tqdm = functools.partial(_silent_bar, bar)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(_lm_eval_noise)
        for m, bar in zip(modules, saved, strict=True):
            m.tqdm = bar


def _silent_bar(bar: Any, *args: Any, **kwargs: Any) -> Any:
    return bar(*args, **{**kwargs, "disable": True})


_ENV_INFO: dict[str, Any] = {}
"""What lm-eval's `add_env_info` wrote into a results dict, collected once per process."""


@contextlib.contextmanager
def lm_eval_costs_once() -> Iterator[None]:
    """While lm-eval runs: two of its costs paid once per process instead of once per call.

    - `simple_evaluate` (called once per task here) records the environment: with torch installed
      that is torch's `collect_env`, about ten subprocesses (`pip list` among them), 1.5 s of a
      3.2 s pass of 50 arc_easy items on the nano model. The process's environment does not change
      between tasks: it is collected at the first call and copied into every later result.
    - Every prompt field of every document compiles its Jinja template again (`utils.apply_template`,
      0.4 s of that pass): each template is compiled once and rendered per document.
    What lands in the results is what lm-eval would have written."""
    import lm_eval.evaluator
    import lm_eval.utils

    saved = lm_eval.evaluator.add_env_info, lm_eval.utils.apply_template
    collect = saved[0]

    def add_env_info(storage: dict[str, Any]) -> None:
        if not _ENV_INFO:
            collect(_ENV_INFO)
        storage.update(_ENV_INFO)

    lm_eval.evaluator.add_env_info = add_env_info
    lm_eval.utils.apply_template = _apply_template
    try:
        yield
    finally:
        lm_eval.evaluator.add_env_info, lm_eval.utils.apply_template = saved


@functools.lru_cache(maxsize=4096)
def _template(source: str) -> Any:
    import lm_eval.utils

    return lm_eval.utils.env.from_string(source)


def _apply_template(template: str, doc: dict[str, Any]) -> str:
    return str(_template(template).render(**doc))


def run_task(
    lm: Any,
    spec: TaskSpec,
    *,
    data: str = "auto",
    include_path: Sequence[str] = (),
    seed: int = 1234,
    bootstrap_iters: int = 1000,
) -> dict[str, Any]:
    """lm-eval's results for one task spec (samples included) plus where its documents came from.

    `results["marin_lab_sources"]`: per leaf task, {data_source, split, default_split, fewshot_split};
    `results["marin_lab_truncated"]`: requests whose prompt was cut from the left;
    `results["marin_lab_programs"]`: shapes compiled for this task (batch, bucket length).
    """
    from lm_eval.evaluator import simple_evaluate

    if data not in ("auto", "offline", "hub"):
        raise HarnessError(f"data={data!r}: use 'auto', 'offline' or 'hub'")
    if spec.limit_mode not in LIMIT_MODES:
        raise HarnessError(f"limit_mode={spec.limit_mode!r}: use 'sample' (a seeded random sample) or 'first'")
    check_task_names([spec.name], include_path)
    manager = task_manager(include_path, [spec.name])
    record: dict[str, dict[str, Any]] = {}
    ours = isinstance(lm, MarinLM)  # any lm-eval model runs (the oracle test runs lm-eval's hf backend)
    if ours:
        lm.truncated = 0
    before = len(lm.programs) if ours else 0
    # lm-eval bootstraps non-mean metrics' stderr in a process pool unless told not to; stay in-process.
    os.environ.setdefault("DISABLE_MULTIPROC", "1")
    with _document_source(data, record), quiet_lm_eval(), lm_eval_costs_once():
        sampled = spec.limit is not None and spec.limit_mode == "sample"
        tasks, chosen, totals = _sampled_items(manager, spec, seed) if sampled else ([spec.name], None, {})
        results = simple_evaluate(
            model=lm,
            tasks=tasks,
            num_fewshot=spec.num_fewshot,
            limit=None if sampled else spec.limit,
            samples=chosen,
            log_samples=True,
            bootstrap_iters=bootstrap_iters,
            random_seed=seed,
            numpy_random_seed=seed,
            torch_random_seed=None,
            fewshot_random_seed=seed,
            task_manager=manager,
        )
    if results is None:
        raise HarnessError(f"task {spec.name}: lm-eval returned no results")
    results["marin_lab_sources"] = record
    results["marin_lab_truncated"] = lm.truncated if ours else None
    results["marin_lab_programs"] = len(lm.programs) - before if ours else None
    results["marin_lab_items"] = {
        "limit_mode": spec.limit_mode if spec.limit is not None else None,
        "sample_seed": seed if sampled else None,
        "total_items": totals or None,
        "item_ids": {name: list(ids) for name, ids in (chosen or {}).items()} or None,
    }
    return results


class _ItemIds(list[int]):
    """Sorted item indices; lm-eval tests `i in samples` for every document, so membership is a set's."""

    def __init__(self, ids: Sequence[int]) -> None:
        super().__init__(ids)
        self._set = frozenset(ids)

    def __contains__(self, item: object) -> bool:
        return item in self._set


def sample_items(total: int, limit: int, seed: int, task: str) -> list[int]:
    """`limit` of a task's `total` item indices, drawn at random from (seed, task name) and sorted:
    the same seed gives the same items on every machine (Python's string seeding is sha512-based)."""
    if limit >= total:
        return list(range(total))
    return sorted(random.Random(f"{seed}:{task}").sample(range(total), limit))


def _sampled_items(manager: Any, spec: TaskSpec, seed: int) -> tuple[list[Any], dict[str, list[int]], dict[str, int]]:
    """The task objects to run, a seeded sample of `spec.limit` items of each leaf task (lm-eval's
    `samples=`, which keeps each item's own doc_id), and each leaf task's item count. The tasks are
    built here (their documents loaded once) to count their items before the sample is drawn."""
    assert spec.limit is not None
    loaded = manager.load([spec.name])
    leaves: dict[str, Any] = loaded["tasks"]
    if spec.name in leaves:
        top = [leaves[spec.name]]
    elif spec.name in loaded["groups"]:
        top = [loaded["groups"][spec.name]]
    else:  # a tag: its tasks
        top = list(leaves.values())
    chosen: dict[str, list[int]] = {}
    totals: dict[str, int] = {}
    for name, task in sorted(leaves.items()):
        totals[name] = len(task.eval_docs)
        if spec.limit < totals[name]:  # a task with no more items than the cap is scored whole
            chosen[name] = _ItemIds(sample_items(totals[name], spec.limit, seed, name))
    return top, chosen, totals


def finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(float(x))
