"""Run history: every run of an experiment keeps its own record.

The experiment record `{experiments}/{script}-{hash8}.json` describes the latest run (kept as it
was, for compatibility: `marin-lab status`, gc and the browser list experiments from it). Beside
it, `{experiments}/{script}-{hash8}/runs/{started}-{run id}.json` is written once per run, at its
start and again at its end, and never overwritten by another run; its format and its one parser
are `marin_lab.store.run_record`.

A step's outcome in a run is `executed` (this run ran it to SUCCESS), `reused` (found it done),
`failed`, `refused` (failed before; not run again without --force_run_failed), `dep_failed`,
`cancelled` (interrupted), `lost` (another driver took its lease), `not started`, or `unselected`.
A run left `running` by a driver that died (kill -9, a lost machine) is read as `running, driver
gone` when its process is provably gone on the reader's host (`experiments.run_state`).
Terminal step statuses written by a run carry its id (`"run"`), so a reader tells which run
produced a step even after no-op reruns.
"""

from __future__ import annotations

import logging
import sys
import uuid
from collections.abc import Sequence
from typing import Any

from marin_lab.execution.review.decide import Decision
from marin_lab.execution.run.supervisor import StepOutcome
from marin_lab.execution.state.lease import process_identity
from marin_lab.execution.state.status import now_iso
from marin_lab.io.fs import join, write_json
from marin_lab.io.secrets import redact
from marin_lab.store.layout import RUNS_DIR, run_record_name
from marin_lab.store.run_record import RunDoc

logger = logging.getLogger(__name__)

OUTCOMES = ("executed", "reused", "failed", "refused", "dep_failed", "cancelled", "lost", "not started", "unselected")


def new_run_id() -> str:
    return uuid.uuid4().hex[:8]


def step_outcome(decision: Decision, outcome: StepOutcome | None) -> str:
    """What one run did with one step (see the module docstring)."""
    if decision.action == "unselected":
        return "unselected"
    if outcome is None:
        return "not started"
    if outcome.status == "SUCCESS":
        return "executed" if outcome.executed else "reused"
    if outcome.status == "FAILED":
        return "failed" if outcome.executed or decision.action != "fail" else "refused"
    return {"DEP_FAILED": "dep_failed", "CANCELLED": "cancelled", "LOST": "lost"}.get(
        outcome.status, outcome.status.lower()
    )


class RunRecord:
    """One run's record, written at the start of the run and at its end."""

    def __init__(
        self,
        experiments_base: str,
        experiment_id: str,
        *,
        run_id: str,
        driver: str,
        backend: str,
        script: str | None,
        git: dict[str, Any] | None,
        decisions: Sequence[Decision],
    ):
        self.started = now_iso()
        self.run_id = run_id
        self.url = join(experiments_base, experiment_id, RUNS_DIR, run_record_name(self.started, run_id))
        self.decisions = list(decisions)
        self.doc = RunDoc(
            run=run_id,
            experiment=experiment_id,
            started=self.started,
            command_line=list(sys.argv),
            driver=driver,
            backend=backend,
            script=script,
            git=git,
            process=process_identity(),
            steps=[
                {
                    "identity": d.step.identity,
                    "name": d.step.name,
                    "decision": d.action,
                    "reason": d.reason,
                    "outcome": None,
                }
                for d in self.decisions
            ],
        )

    def write_start(self) -> None:
        self._write()

    def finish(self, outcomes: dict[str, StepOutcome], outcome: str) -> None:
        counts: dict[str, int] = {}
        for entry, decision in zip(self.doc.steps, self.decisions, strict=True):
            entry["outcome"] = step_outcome(decision, outcomes.get(decision.step.identity))
            counts[entry["outcome"]] = counts.get(entry["outcome"], 0) + 1
        self.doc.ended, self.doc.outcome, self.doc.counts = now_iso(), outcome, counts
        self._write()

    def _write(self) -> None:
        try:
            # Redacted whole, as the experiment record is: a token on the command line is text too.
            write_json(self.url, redact(self.doc.to_json()))
        except Exception:  # the run's history is informative; a storage hiccup must not stop the run
            logger.warning("could not write the run record %s", self.url, exc_info=True)
