"""A launcher-side secret in a launched driver's arguments is scrubbed wherever the supervisor writes,
although the cluster's node (here: the driver's host, without the launcher's variable) never had it."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

from marin_lab.cluster.launch_state import attempt_log_url
from marin_lab.cluster.supervisor import DriverHost, LaunchSupervisor
from marin_lab.io.secrets import secrets_in_args

VALUE = "plain-launcher-value-1234"  # no credential shape: known only by the launcher's variable
FLAGGED = "opaque-flag-value-5678"


def test_launch_side_secrets_are_scrubbed_from_the_attempt_log_and_follow(tmp_path, monkeypatch):
    prefix = str(tmp_path)
    argv = [
        sys.executable,
        "-c",
        "import sys; print('args:', *sys.argv[1:], flush=True)",
        f"--data=/x/{VALUE}/y",
        "--hf_token",
        FLAGGED,
        "--api_key=" + FLAGGED[::-1],
        "--steps",
        "3",
    ]
    monkeypatch.setenv("LAUNCHER_API_TOKEN", VALUE)
    secrets = secrets_in_args(argv)
    assert VALUE in secrets and FLAGGED in secrets and FLAGGED[::-1] in secrets and "3" not in secrets
    # What the node knows: not the launcher's variable.
    monkeypatch.delenv("LAUNCHER_API_TOKEN")
    (tmp_path / "launches" / "r-1" / "logs").mkdir(parents=True)
    host = DriverHost()
    host.spawn(argv, {}, attempt_log_url(prefix, "r-1", 1), json.loads(json.dumps(secrets)))
    assert host.wait() == 0
    log = Path(attempt_log_url(prefix, "r-1", 1)).read_text()
    assert "args:" in log and "--steps 3" in log
    assert VALUE not in log and FLAGGED not in log and FLAGGED[::-1] not in log and log.count("<redacted>") == 3
    # The supervisor echoes the attempt's log into its own output, the Ray job's log
    # (`ray job logs`, `--follow`): the scrubbed copy, never the driver's raw output.
    out = io.StringIO()
    state = {"run_id": "r-1", "status": "RUNNING", "max_restarts": 1, "attempts": []}
    LaunchSupervisor(prefix, state, {}, argv, secrets, out=out)._echo(attempt_log_url(prefix, "r-1", 1))
    assert "args:" in out.getvalue() and VALUE not in out.getvalue() and FLAGGED not in out.getvalue()


def test_a_driver_gets_the_carried_secrets_as_secret_named_variables(tmp_path):
    """So the driver's own records and logs scrub them as well."""
    (tmp_path / "launches" / "r-2" / "logs").mkdir(parents=True)
    host = DriverHost()
    code = (
        "import os; from marin_lab.io.secrets import scrub_text; "
        f"print(scrub_text('x {VALUE} y').replace('<', '[').replace('>', ']'))"
    )
    host.spawn([sys.executable, "-c", code], {}, attempt_log_url(str(tmp_path), "r-2", 1), [VALUE])
    assert host.wait() == 0
    assert "x [redacted] y" in Path(attempt_log_url(str(tmp_path), "r-2", 1)).read_text()
