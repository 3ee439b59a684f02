"""A prefix whose records cost something: the fixture of the cost tests (CLI, browser, Chromium)."""

from __future__ import annotations

import json
import pathlib

V5E_256 = {
    "kind": "tpu",
    "tpu": "v5e-256",
    "slices": 1,
    "hosts_per_slice": 64,
    "chips_per_slice": 256,
    "chips_per_host": 4,
    "preemptible": True,
}
HOSTILE = "report/<img src=x onerror=window.__xss=1>-44444444"
"""A step never run, whose name a page must show as text."""


def _record(out: pathlib.Path, identity: str, status: str, resources, driver: str, attempts: list[dict]) -> None:
    out.mkdir(parents=True)
    (out / ".executor_info").write_text(
        json.dumps(
            {
                "schema": 1,
                "name": identity.rsplit("-", 1)[0],
                "identity": identity,
                "hash": identity[-8:],
                "output_path": str(out),
                "resources": resources,
                "driver": driver,
                "status": status,
                "attempts": [
                    {"attempt": i + 1, "status": "FAILED", "error": None, "driver": driver, **a}
                    for i, a in enumerate(attempts)
                ],
                "timings": {"started": attempts[0]["started"], "ended": attempts[-1]["ended"]},
            }
        )
    )
    (out / ".executor_status").write_text(json.dumps({"status": status, "driver": driver}))


def build_costed_prefix(tmp_path: pathlib.Path) -> pathlib.Path:
    """A v5e-256 training step preempted once (drv-new), a CPU step reused from an older run
    (drv-old), a GPU step of no declared type (no price), and a step never run."""
    prefix = tmp_path / "store"
    hw = {"kind": "tpu", "type": "v5e-256", "slices": 1, "chips": 256}
    _record(
        prefix / "train/big-11111111",
        "train/big-11111111",
        "SUCCESS",
        V5E_256,
        "drv-new",
        [
            {"kind": "preemption", "started": "2026-11-20T10:00:00Z", "ended": "2026-11-20T10:30:00Z", "hardware": hw},
            {
                "kind": None,
                "started": "2026-11-20T10:40:00Z",
                "ended": "2026-11-20T11:40:00Z",
                "status": "SUCCESS",
                "hardware": hw,
            },
        ],
    )
    _record(
        prefix / "tokenize/docs-22222222",
        "tokenize/docs-22222222",
        "SUCCESS",
        {"num_cpus": 4},
        "drv-old",
        [{"kind": None, "started": "2026-11-19T09:00:00Z", "ended": "2026-11-19T11:00:00Z", "status": "SUCCESS"}],
    )
    _record(
        prefix / "eval/gpu-33333333",
        "eval/gpu-33333333",
        "FAILED",
        {"kind": "gpu", "gpus": 1, "cpus": 1, "memory_gb": None, "accelerator_type": None},
        "drv-new",
        [{"kind": "failure", "started": "2026-11-20T12:00:00Z", "ended": "2026-11-20T13:00:00Z"}],
    )
    steps = ["tokenize/docs-22222222", "train/big-11111111", "eval/gpu-33333333", HOSTILE]
    (prefix / "experiments").mkdir()
    (prefix / "experiments/costed-abcdef12.json").write_text(
        json.dumps(
            {
                "schema": 1,
                "name": "costed",
                "hash": "abcdef12",
                "created": "2026-11-20T10:00:00Z",
                "driver": "drv-new",
                "steps": [
                    {"name": s.rsplit("-", 1)[0], "identity": s, "output_path": str(prefix / s), "dependencies": []}
                    for s in steps
                ],
            }
        )
    )
    return prefix


EXPECTED_STEPS = {
    "tokenize/docs-22222222": "$0.25 (8.00 accelerator-hours on cpu x4) reused",
    "train/big-11111111": "$460.80 (384 accelerator-hours on tpu-v5e x256, 128 of them preempted)",
    "eval/gpu-33333333": "no price for gpu (1.00 accelerator-hours on gpu x1)",
    HOSTILE: "no record",
}
EXPECTED_TOTAL = (
    "cost: $461.05 (393 accelerator-hours) + 1 step of unknown cost; saved by reuse: $0.25 "
    "(8.00 accelerator-hours, 1 step)"
)
