"""Experiments and step records under a prefix, shaped for the browser's API.

Everything here reads; nothing writes. A missing or corrupt file becomes a `state` on the answer
(`missing`, `corrupt`) so a page can say so instead of failing.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections import Counter
from typing import Any

from marin_lab.browser import graph
from marin_lab.browser.errors import BadRequestError, ForbiddenPathError, NotFoundError
from marin_lab.browser.experiment_diff import annotate_siblings
from marin_lab.browser.paths import Roots
from marin_lab.browser.storage import (
    MAX_RECORD_BYTES,
    Loaded,
    child,
    exists,
    list_dir,
    parallel_map,
    read_bounded,
    read_record,
)
from marin_lab.execution.record.experiments import ListedExperiment, run_state
from marin_lab.execution.review.baseline import LastRun, RecordIndex, last_run_of
from marin_lab.execution.review.cost import step_cost
from marin_lab.execution.review.prices import PriceTable, default_prices
from marin_lab.execution.state.lease import driver_gone_since
from marin_lab.explain import explain_record
from marin_lab.io.secrets import Scrubber, redact, text_scrubber
from marin_lab.io.text import strip_ansi_in
from marin_lab.store.artifact_record import parse_artifact_record
from marin_lab.store.errors import RecordError
from marin_lab.store.experiment_record import parse_experiment_record
from marin_lab.store.launch_record import parse_launch_record
from marin_lab.store.layout import (
    ARTIFACT_RECORD_FILE,
    CORRUPT,
    EXPERIMENTS_DIR,
    INFO_FILE,
    LEASE_FILE,
    METRICS_FILE,
    MISSING,
    RESULTS_FILE,
    RUNS_DIR,
    STATUS_FILE,
    Status,
    launch_dir,
    launch_log_url,
    launch_record_url,
)
from marin_lab.store.run_record import parse_run_record
from marin_lab.store.status import listed_status, parse_status
from marin_lab.store.step_record import StepRecord, parse_step_record

logger = logging.getLogger(__name__)

_EXPERIMENT_ID = re.compile(r"[A-Za-z0-9._@+-]+")
_STORED_SCRIPT = re.compile(r"scripts/[A-Za-z0-9._@+-]+\.py")
_EXPERIMENT_HASH = re.compile(r"-(?P<hash>[0-9a-f]{8})\.json$")  # experiments/{script}-{hash8}.json
MAX_SCRIPT_BYTES = 512 * 1024
# What a status file may say beyond the status itself (see execution/run/watch.py); `run` is the id
# of the run that wrote a terminal status (execution/run/run_history.py).
_STATUS_FIELDS = (
    "time",
    "driver",
    "attempt",
    "duration_s",
    "heartbeat",
    "elapsed_s",
    "progress",
    "waiting_for",
    "queued_s",
    "run",
    "damage",
    "files",
    "bytes",
    "error",
)
MAX_RUNS = 100
"""The newest run records an experiment page lists."""
_LEASE_BYTES = 64 * 1024


class Browser:
    """The read side of one prefix: experiments, steps and their records."""

    def __init__(self, prefix: str, roots: Roots, prices: PriceTable | None = None):
        self.roots = roots
        self.prefix = roots.resolve(prefix)
        self.local = "://" not in self.prefix
        self.prices = prices or default_prices()
        """What the cost columns price accelerator-hours at (execution/review/prices.py)."""

    # ---- paths -------------------------------------------------------------------------------
    def step_dir(self, step: dict) -> str | None:
        """Where a step listed in an experiment lives, confined to the roots.

        The recorded output path is used when it lies inside the roots; a prefix that was copied
        or moved still works because identities never contain the prefix: `{prefix}/{identity}`.
        """
        candidates = []
        recorded = step.get("output_path")
        if isinstance(recorded, str) and recorded:
            candidates.append(recorded)
        identity = step.get("identity")
        if isinstance(identity, str) and identity:
            candidates.append(child(self.prefix, identity))
        for candidate in candidates:
            try:
                return self.roots.resolve(candidate)
            except (ForbiddenPathError, BadRequestError):
                continue
        return None

    def status_of(self, step_dir: str | None, scrubber: Scrubber | None = None) -> str:
        """The latest status of a step folder, or MISSING / CORRUPT."""
        return self.status_detail(step_dir, scrubber)["status"]

    def status_detail(self, step_dir: str | None, scrubber: Scrubber | None = None) -> dict[str, Any]:
        """The latest status with what watching needs: driver, duration, heartbeat, progress line,
        and `damage` for a CORRUPT one. Parsed by the store's one status parser
        (`marin_lab.store.status.listed_status`, as `marin-lab status` lists it) from bytes read
        through the roots."""
        if step_dir is None:
            return {"status": MISSING}
        value = redact(listed_status(step_dir, self._read), scrubber)
        detail = {k: value.get(k) for k in _STATUS_FIELDS if k in value}
        if value["status"] == Status.RUNNING:
            gone = driver_gone_since(self._lease_bytes(step_dir), value)
            if gone:  # a frozen RUNNING: nobody runs it any more
                detail["driver_gone_since"] = gone
        return {**detail, "status": value["status"]}

    def _read(self, url: str) -> bytes | None:
        return read_record(self.roots, url)

    def _lease_bytes(self, step_dir: str) -> bytes | None:
        try:
            return read_bounded(self.roots, child(step_dir, LEASE_FILE), _LEASE_BYTES)
        except (NotFoundError, FileNotFoundError, NotADirectoryError):
            return None
        except (OSError, ValueError, ForbiddenPathError):
            return b""  # unreadable: parsed as no holder, i.e. no live driver

    # ---- experiments -------------------------------------------------------------------------
    def experiment_files(self) -> list[dict]:
        folder = child(self.prefix, EXPERIMENTS_DIR)
        return [e for e in list_dir(self.roots, folder) if e["type"] == "file" and e["name"].endswith(".json")]

    def experiments(self) -> list[dict]:
        """Every experiment under the prefix, newest first, with counts of its steps' statuses."""
        files = self.experiment_files()
        loaded = parallel_map(
            lambda e: load_experiment(self.roots, child(self.prefix, EXPERIMENTS_DIR, e["name"])),
            files,
            local=self.local,
        )
        all_dirs: dict[str, str | None] = {}
        for item in loaded:
            if item.state == "ok":
                for step in _steps_of(item.value):
                    all_dirs.setdefault(_step_key(step), self.step_dir(step))
        keys = list(all_dirs)
        scrubber = text_scrubber()
        statuses = dict(
            zip(
                keys, parallel_map(lambda k: self.status_of(all_dirs[k], scrubber), keys, local=self.local), strict=True
            )
        )
        out = []
        for entry, item in zip(files, loaded, strict=True):
            exp_id = entry["name"][: -len(".json")]
            summary: dict[str, Any] = {"id": exp_id, "file": item.url, **item.as_json()}
            if item.state == "ok":
                exp = item.value
                steps = _steps_of(exp)
                summary.update(
                    _header(exp, exp_id),
                    steps=len(steps),
                    status_counts=dict(Counter(statuses[_step_key(s)] for s in steps)),
                )
            else:
                summary.update(name=exp_id, created=None, steps=0, status_counts={})
            out.append(summary)
        # ISO-8601 strings sort by time; experiments without a time go last.
        out.sort(key=lambda s: (s.get("created") or "", s["id"]), reverse=True)
        # The records of one script side by side: each says what it differs by from the one before.
        records = {e["name"][: -len(".json")]: i.value for e, i in zip(files, loaded, strict=True) if i.state == "ok"}
        annotate_siblings(out, records)
        return out

    def experiment_record(self, exp_id: str) -> Loaded:
        """The record of experiment `exp_id` as written ('ok' or 'corrupt'); a missing one is a NotFoundError."""
        if not _EXPERIMENT_ID.fullmatch(exp_id or ""):
            raise BadRequestError(f"experiment id {exp_id!r} is not a file name under experiments/")
        loaded = load_experiment(self.roots, child(self.prefix, EXPERIMENTS_DIR, f"{exp_id}.json"))
        if loaded.state == "missing":
            raise NotFoundError(f"no experiment {exp_id!r} under {self.prefix}/experiments/")
        return loaded

    def experiment(self, exp_id: str) -> dict:
        """One experiment with every step's status and a layout of its DAG."""
        loaded = self.experiment_record(exp_id)
        result: dict[str, Any] = {"id": exp_id, "file": loaded.url, **loaded.as_json()}
        if loaded.state != "ok":
            result.update(steps=[], graph=graph.layout([], {}), status_counts={})
            return result
        exp = loaded.value
        steps = _steps_of(exp)
        dirs = [self.step_dir(s) for s in steps]
        scrubber = text_scrubber()  # one reading of the environment for the whole listing
        details = parallel_map(lambda d: self.status_detail(d, scrubber), dirs, local=self.local)
        statuses = [d["status"] for d in details]
        run_driver = _text(exp.get("driver"))
        keys = [_step_key(s) for s in steps]
        deps = {k: [d for d in _deps_of(s)] for k, s in zip(keys, steps, strict=True)}
        dependents: dict[str, list[str]] = {}
        for key in keys:
            for dep in deps[key]:
                dependents.setdefault(dep, []).append(key)
        known = set(keys)
        runs = self.runs(exp_id)
        rows: list[dict[str, Any]] = []
        for key, step, step_dir, detail in zip(keys, steps, dirs, details, strict=True):
            status = detail["status"]
            rows.append(
                {
                    **{
                        k: detail[k]
                        for k in (
                            "duration_s",
                            "progress",
                            "waiting_for",
                            "heartbeat",
                            "elapsed_s",
                            "driver_gone_since",
                            "files",
                            "bytes",
                        )
                        if k in detail
                    },
                    # A failed step's one line (the error's first line, kept with its status).
                    "error": (_text(detail.get("error")) or "")[:300] or None if status == "FAILED" else None,
                    # The run whose record says it wrote this step's status (SUCCESS, FAILED, CANCELLED).
                    "produced_by": _produced_by(detail, runs) if status in ("SUCCESS", "FAILED", "CANCELLED") else None,
                    # The latest run of this experiment did the work, or found it done (reused).
                    "run": (
                        ("executed" if detail.get("driver") == run_driver else "reused")
                        if status == "SUCCESS" and run_driver
                        else None
                    ),
                    "key": key,
                    "name": _text(step.get("name")) or key,
                    "identity": _text(step.get("identity")),
                    "fn": _text(step.get("fn")),
                    "output_path": step_dir,
                    "status": status,
                    "dependencies": deps[key],
                    "external_dependencies": [d for d in deps[key] if d not in known],
                    "dependents": dependents.get(key, []),
                    "artifact": self._artifact_row(step, step_dir),
                }
            )
        result.update(
            _header(exp, exp_id),
            command_line=exp.get("command_line") if isinstance(exp.get("command_line"), list) else None,
            git=redact(exp.get("git")) if isinstance(exp.get("git"), dict) else None,
            code=self._code(exp.get("code")),
            steps=rows,
            status_counts=dict(Counter(statuses)),
            graph=graph.layout(keys, deps),
            launch=self._launch(exp.get("launch")),
            runs=runs,
            latest_run=_text(exp.get("run")),
        )
        return result

    def runs(self, exp_id: str) -> list[dict]:
        """The experiment's run records (execution/run/run_history.py), newest first: each run's
        command line, times, outcome, and what it executed and reused."""
        folder = child(self.prefix, EXPERIMENTS_DIR, exp_id, RUNS_DIR)
        names = sorted(
            (e["name"] for e in list_dir(self.roots, folder) if e["type"] == "file" and e["name"].endswith(".json")),
            reverse=True,
        )[:MAX_RUNS]
        return parallel_map(lambda n: self._run_record(child(folder, n)), names, local=self.local)

    def _run_record(self, url: str) -> dict[str, Any]:
        """One run as the experiment page lists it, parsed by the store's one parser
        (`marin_lab.store.run_record`, as `marin-lab status` reads it)."""
        try:
            raw = self._read(url)
            if raw is None:
                return {"file": url, "state": "missing", "error": "file does not exist"}
            run = parse_run_record(raw, url)
        except (OSError, RecordError) as err:
            return {"file": url, "state": "corrupt", "error": str(err)}
        return redact(
            {
                "file": url,
                "state": "ok",
                "run": run.run,
                "started": run.started,
                "ended": run.ended,
                "outcome": run_state(run),
                "command_line": run.command_line,
                "driver": run.driver,
                "backend": run.backend,
                "counts": run.counts,
                "executed": run.executed,
            }
        )

    def _launch(self, launch: Any) -> dict | None:
        """The launched run that wrote this record (`marin-lab launch`): its driver attempts, each
        with where its log is (`/api/log?path=<log_path>&attempt=N` serves it)."""
        if not isinstance(launch, dict) or not _EXPERIMENT_ID.fullmatch(str(launch.get("run_id") or "")):
            return None
        run_id = str(launch["run_id"])
        folder = launch_dir(self.prefix, run_id)
        loaded = self._launch_record(launch_record_url(self.prefix, run_id), run_id)
        out: dict[str, Any] = {"run_id": launch["run_id"], "log_path": folder, **loaded.as_json()}
        state = loaded.value if loaded.state == "ok" and isinstance(loaded.value, dict) else {}
        attempts = [a for a in state.get("attempts", []) if isinstance(a, dict)]
        out.update(
            status=_text(state.get("status")),
            message=_text(state.get("message")),
            max_restarts=state.get("max_restarts"),
            restarts=max(len(attempts) - 1, 0),
            attempts=[
                {
                    **{
                        k: a.get(k)
                        for k in ("attempt", "outcome", "reason", "node", "host", "started", "ended", "exit_code")
                    },
                    "log": launch_log_url(self.prefix, run_id, str(a.get("attempt"))),
                }
                for a in attempts
            ],
        )
        return out

    def _launch_record(self, url: str, run_id: str) -> Loaded:
        """The launch record parsed by the store's one parser (`marin_lab.store.launch_record`, as
        `marin-lab launch --status` reads it): a damaged one is 'corrupt' with its one line."""
        try:
            raw = self._read(url)
        except OSError as err:
            return Loaded(url, "corrupt", error=str(err))
        if raw is None:
            return Loaded(url, "missing", error="file does not exist")
        try:
            return Loaded(url, "ok", value=parse_launch_record(raw, url, run_id))
        except RecordError as err:
            return Loaded(url, "corrupt", error=str(err))

    def _code(self, code: Any) -> dict | None:
        """The experiment's code provenance, with the stored script's text (docs/reproducibility.md)."""
        if not isinstance(code, dict):
            return None
        out = {
            k: code.get(k)
            for k in (
                "script",
                "commit",
                "dirty",
                "changed",
                "changed_count",
                "diff",
                "diff_bytes",
                "diff_truncated",
                "script_sha256",
                "script_missing",
            )
        }
        stored = code.get("stored_script")
        if isinstance(stored, str) and _STORED_SCRIPT.fullmatch(stored):
            url = child(self.prefix, EXPERIMENTS_DIR, *stored.split("/"))
            out["stored_script"] = url
            try:
                out["script_text"] = read_bounded(self.roots, url, MAX_SCRIPT_BYTES).decode("utf-8", errors="replace")
            except (OSError, ValueError, ForbiddenPathError, NotFoundError) as err:
                out["script_error"] = f"{type(err).__name__}: {err}"
        return redact(out)

    # ---- steps -------------------------------------------------------------------------------
    def step(self, path: str, exp_id: str | None = None) -> dict:
        """A step folder's record, status, explain diff, and links to its neighbours."""
        step_dir = self.roots.resolve(path)
        if step_dir.rstrip("/").endswith("/" + INFO_FILE):
            step_dir = step_dir.rstrip("/")[: -len("/" + INFO_FILE)]
        info, typed = self._step_record(child(step_dir, INFO_FILE))
        status = self._status_file(child(step_dir, STATUS_FILE))
        if info.state == "missing" and status.state == "missing" and not list_dir(self.roots, step_dir):
            raise NotFoundError(f"no step at {step_dir}: the folder is empty or missing")
        # The page shows the record as written (unknown fields included), redacted like the writer does.
        # Terminal colour codes (Ray's errors carry them) are taken out of what a page shows.
        record = strip_ansi_in(redact(info.value)) if typed is not None else None
        out: dict[str, Any] = {
            "output_path": step_dir,
            "info": info.as_json(),
            "record": record,
            "status_file": {**status.as_json(), "value": strip_ansi_in(status.value)},
            "status": self.status_of(step_dir),
        }
        if out["status"] == "RUNNING":  # a frozen RUNNING says so: `RUNNING, driver gone since T`
            out["driver_gone_since"] = self.status_detail(step_dir).get("driver_gone_since")
        name = _text(record.get("name")) if record else None
        identity = _text(record.get("identity")) if record else None
        if identity is None:
            identity = step_dir.rstrip("/")[len(self.prefix) + 1 :] if step_dir.startswith(self.prefix + "/") else None
        out["name"] = name
        out["identity"] = identity
        out["dependencies"] = self._dependencies(record)
        out["dependents"] = self._dependents(identity, exp_id) if identity else []
        index = self._index()
        out["explain"] = (
            explain_record(index, typed, last_run=self._run_before(typed, index)) if typed is not None else None
        )
        out["artifact"] = self._artifact_record(step_dir)
        out["cost"] = step_cost(identity or step_dir, typed, self.prices).to_json() if typed is not None else None
        # Two existence checks, not a listing: a data step's folder can hold thousands of shards.
        out["has_metrics"], out["has_results"] = parallel_map(
            lambda url: exists(self.roots, url),
            [child(step_dir, METRICS_FILE), child(step_dir, RESULTS_FILE)],
            local=self.local,
        )
        return out

    def _step_record(self, url: str) -> tuple[Loaded, StepRecord | None]:
        """The step record as the page shows it (as written), and typed by the store's one parser:
        a field of the wrong type is damage here as it is to the executor."""
        try:
            raw = self._read(url)
        except OSError as err:
            return Loaded(url, "corrupt", error=str(err)), None
        if raw is None:
            return Loaded(url, "missing", error="file does not exist"), None
        try:
            typed = parse_step_record(raw, url)
        except RecordError as err:
            return Loaded(url, "corrupt", error=str(err)), None
        return Loaded(url, "ok", value=json.loads(raw)), typed

    def _status_file(self, url: str) -> Loaded:
        """The status file as the store's parser reads it (ours or Marin's format)."""
        try:
            raw = self._read(url)
        except OSError as err:
            return Loaded(url, "corrupt", error=str(err))
        if raw is None:
            return Loaded(url, "missing", error="file does not exist")
        parsed = parse_status(raw, url)
        if parsed["status"] == CORRUPT:
            return Loaded(url, "corrupt", error=parsed.get("damage"))
        return Loaded(url, "ok", value=parsed)

    def _artifact_record(self, step_dir: str | None) -> dict[str, Any] | None:
        """The `.artifact.json` of a name@version artifact (marin_lab.marin.lazy), as written, redacted."""
        if step_dir is None:
            return None
        url = child(step_dir, ARTIFACT_RECORD_FILE)
        try:
            raw = self._read(url)
            doc = parse_artifact_record(raw, url) if raw is not None else None
        except (OSError, RecordError):
            return None
        if doc is None:
            return None
        fields = ("name", "version", "fingerprint", "result_type", "deps", "source", "result", "provenance")
        return redact({k: getattr(doc, k) for k in fields})

    def _artifact_row(self, step: dict, step_dir: str | None) -> dict[str, Any] | None:
        """For a name@version artifact's step: its address, the fingerprint this experiment planned,
        and the one its output was built with (`drift` when they differ: the output was reused)."""
        version = step.get("version")
        config = version.get("config") if isinstance(version, dict) else None
        identity = config.get("identity") if isinstance(config, dict) else None
        if not isinstance(identity, dict) or not isinstance(identity.get("artifact"), str):
            return None
        built = self._artifact_record(step_dir)
        planned = _text(identity.get("fingerprint"))
        built_fp = built["fingerprint"] if built else None
        return {
            "address": identity["artifact"],
            "fingerprint": planned,
            "built_fingerprint": built_fp,
            "drift": bool(planned and built_fp and planned != built_fp),
        }

    def _run_before(self, record: StepRecord, index: RecordIndex) -> LastRun | None:
        """The run of the experiment that made `record` before that one (`last_run_of` over the
        experiment records written before the step started): what its explain compares with, as
        `marin-lab explain` and the dry run compare a planned step with the experiment's last run.
        Only that script's records are read (`{script}-{hash8}.json`), and none for a step with no
        other version."""
        code = record.code if isinstance(record.code, dict) else {}
        script, experiment = code.get("script"), code.get("experiment")
        made = _EXPERIMENT_HASH.search(experiment) if isinstance(experiment, str) else None
        if not isinstance(script, str) or made is None or not record.recency or not record.name:
            return None
        if all(r.identity == record.identity for r in index.versions_of(record.name)):
            return None
        stem = os.path.splitext(os.path.basename(script))[0]
        files = [e for e in self.experiment_files() if _EXPERIMENT_HASH.sub("", e["name"]) == stem]
        listed = parallel_map(
            lambda e: read_listed_experiment(self.roots, child(self.prefix, EXPERIMENTS_DIR, e["name"])),
            files,
            local=self.local,
        )
        earlier = [e for e in listed if e is not None and e.record is not None and (e.created or "") < record.recency]
        earlier.sort(key=lambda e: e.created or "", reverse=True)
        return last_run_of(earlier, script, made["hash"])

    def _index(self) -> RecordIndex:
        """Execution's record index, reading through the browser's confined storage."""

        def names(folder: str) -> list[str]:
            return [e["name"] for e in list_dir(self.roots, folder) if e["type"] == "directory"]

        def read(url: str) -> bytes | None:
            try:
                return read_bounded(self.roots, url, MAX_RECORD_BYTES)
            except (NotFoundError, FileNotFoundError, ForbiddenPathError):
                return None

        return RecordIndex(self.prefix, list_names=names, read=read)

    def _dependencies(self, record: dict | None) -> list[dict]:
        if not record or not isinstance(record.get("dependencies"), list):
            return []
        deps = [d for d in record["dependencies"] if isinstance(d, dict)]
        dirs = [self.step_dir(d) for d in deps]
        scrubber = text_scrubber()
        statuses = parallel_map(lambda d: self.status_of(d, scrubber), dirs, local=self.local)
        return [
            {"name": _text(d.get("name")), "identity": _text(d.get("identity")), "output_path": p, "status": s}
            for d, p, s in zip(deps, dirs, statuses, strict=True)
        ]

    def _dependents(self, identity: str, exp_id: str | None) -> list[dict]:
        """Steps whose dependencies include `identity`, from the experiment files (all, or one)."""
        if exp_id:
            if not _EXPERIMENT_ID.fullmatch(exp_id):
                raise BadRequestError(f"experiment id {exp_id!r} is not a file name under experiments/")
            names = [f"{exp_id}.json"]
        else:
            names = [e["name"] for e in self.experiment_files()]
        loaded = parallel_map(
            lambda n: load_experiment(self.roots, child(self.prefix, EXPERIMENTS_DIR, n)), names, local=self.local
        )
        found: dict[str, dict] = {}
        for item in loaded:
            if item.state != "ok":
                continue
            for step in _steps_of(item.value):
                if identity in _deps_of(step) and _step_key(step) not in found:
                    found[_step_key(step)] = step
        steps = list(found.values())
        dirs = [self.step_dir(s) for s in steps]
        scrubber = text_scrubber()
        statuses = parallel_map(lambda d: self.status_of(d, scrubber), dirs, local=self.local)
        return [
            {"name": _text(s.get("name")), "identity": _text(s.get("identity")), "output_path": p, "status": st}
            for s, p, st in zip(steps, dirs, statuses, strict=True)
        ]


def _produced_by(detail: dict, runs: list[dict]) -> dict | None:
    """The run that wrote a step's latest status: by the run id the status carries, else (records
    written before run ids) the newest run of the same driver that executed it."""
    run_id = detail.get("run")
    for run in runs:
        if run.get("state") == "ok" and run_id and run.get("run") == run_id:
            return {k: run.get(k) for k in ("run", "started", "outcome", "command_line")}
    driver = detail.get("driver")
    for run in runs:
        if run.get("state") == "ok" and not run_id and driver and run.get("driver") == driver:
            return {k: run.get(k) for k in ("run", "started", "outcome", "command_line")}
    return None


def read_listed_experiment(roots: Roots, url: str) -> ListedExperiment | None:
    """An experiment record read through the roots and parsed by the store's one parser
    (`marin_lab.store.experiment_record`, as `marin-lab status` and gc read it): the typed record,
    or no record with the parser's one line naming the file when it is damaged; None when there is
    no such file."""
    try:
        raw = read_record(roots, url)
    except OSError as err:
        return ListedExperiment(url, None, str(err))
    if raw is None:
        return None
    try:
        return ListedExperiment(url, parse_experiment_record(raw, url))
    except RecordError as err:
        return ListedExperiment(url, None, str(err))


def load_experiment(roots: Roots, url: str) -> Loaded:
    """The experiment record as the pages show it (`read_listed_experiment`): 'ok' with the record
    as written, 'missing', or 'corrupt' with the parser's one line naming the file."""
    listed = read_listed_experiment(roots, url)
    if listed is None:
        return Loaded(url, "missing", error="file does not exist")
    if listed.record is None:
        return Loaded(url, "corrupt", error=listed.damage)
    return Loaded(url, "ok", value=listed.record.to_json())


def _header(exp: dict, exp_id: str) -> dict[str, str | None]:
    """What the experiment list and the experiment page both show first."""
    return {
        "name": _text(exp.get("name")) or exp_id,
        "script": _text(exp.get("script")),
        "description": _text(exp.get("description")),
        "created": _text(exp.get("created")),
        "hash": _text(exp.get("hash")),
    }


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _steps_of(exp: dict) -> list[dict]:
    steps = exp.get("steps")
    return [s for s in steps if isinstance(s, dict)] if isinstance(steps, list) else []


def _step_key(step: dict) -> str:
    return _text(step.get("identity")) or _text(step.get("output_path")) or _text(step.get("name")) or "?"


def _deps_of(step: dict) -> list[str]:
    deps = step.get("dependencies")
    if not isinstance(deps, list):
        return []
    out = []
    for dep in deps:
        # The experiment file lists identities; tolerate the record's {"identity": ...} form too.
        if isinstance(dep, str):
            out.append(dep)
        elif isinstance(dep, dict) and isinstance(dep.get("identity"), str):
            out.append(dep["identity"])
    return out
