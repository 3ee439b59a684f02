"""The `marin-lab launch` subcommand: its flags, and the three actions (launch, --status, --stop).

A launched run is a Ray job whose submission id is the run id: `ray job status/logs/stop RUN` act
on it as these do.

Ray itself is imported only when a launch connects (cluster/launch.py, cluster/supervisor.py), so
building the `marin-lab` parser stays cheap.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from marin_lab.cluster.launch import LaunchError, follow, job_client, job_status, launch, status, stop
from marin_lab.cluster.launch_state import summary_lines
from marin_lab.io.fs import is_local


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "launch",
        help="run an experiment's driver on a Ray cluster as a Ray job whose supervisor "
        "restarts it when it dies (--status/--stop RUN for a launched run)",
    )
    p.add_argument("script", nargs="?", help="an experiment file inside the working tree")
    p.add_argument(
        "--address",
        default=os.environ.get("RAY_ADDRESS"),
        help="the Ray head's GCS address HOST:PORT (default $RAY_ADDRESS)",
    )
    p.add_argument(
        "--prefix",
        default=os.environ.get("MARIN_PREFIX"),
        help="storage every node reaches (default $MARIN_PREFIX); records and attempt logs go there",
    )
    p.add_argument("--max_restarts", type=int, default=3, help="driver restarts allowed (>= 1; default 3)")
    p.add_argument(
        "--driver_resources", help="JSON resources for the driver, e.g. '{\"CPU\": 1}' (default: none, any node)"
    )
    p.add_argument("--working_dir", help="the tree shipped to the cluster (default: the current directory)")
    p.add_argument("--python", help="the driver's interpreter on the cluster (default: this one)")
    p.add_argument("--follow", action="store_true", help="stream the run's Ray job log until the run ends")
    p.add_argument(
        "--status", metavar="RUN", help="print a launched run's attempts (and, with --address, its Ray job's state)"
    )
    p.add_argument("--stop", metavar="RUN", help="stop a launched run's Ray job (its driver is killed, no restart)")
    p.add_argument("script_args", nargs="*", help="arguments for the experiment (after --)")
    p.set_defaults(func=_cmd_launch)


def _cmd_launch(args: argparse.Namespace) -> int:
    prefix = args.prefix
    if args.status or args.stop:
        if not prefix:
            raise LaunchError("pass --prefix (or set MARIN_PREFIX): the run's record is read from there")
        prefix = os.path.abspath(prefix) if is_local(prefix) else prefix
        if args.stop:
            if not args.address:
                raise LaunchError("--stop needs --address (or RAY_ADDRESS): the cluster its Ray job runs on")
            state = stop(args.address, prefix, args.stop)
        else:
            state = status(prefix, args.status)
        print("\n".join(summary_lines(state)))
        if args.status and args.address:
            job = job_status(job_client(args.address), args.status)
            print(f"  ray job {args.status}: {job or 'not on the cluster at ' + args.address}")
        return 0
    if not args.script:
        raise LaunchError(
            "give an experiment file (marin-lab launch experiments/x.py --address HOST:PORT), or --status/--stop RUN"
        )
    if not args.address:
        raise LaunchError("pass --address HOST:PORT (or set RAY_ADDRESS): the Ray head to run on")
    state = launch(
        args.script,
        list(args.script_args),
        address=args.address,
        prefix=prefix,
        max_restarts=args.max_restarts,
        driver_resources=args.driver_resources,
        working_dir=args.working_dir,
        python=args.python,
    )
    run_id = state["run_id"]
    print(f"launched {run_id} (record: {state['prefix']}/launches/{run_id}/launch.json)", flush=True)
    if not args.follow:
        print(f"  watch: marin-lab launch --status {run_id} --prefix {state['prefix']}")
        return 0
    final = follow(job_client(args.address), state["prefix"], run_id)
    print("\n".join(summary_lines(final)))
    return 0 if final.get("status") == "SUCCEEDED" else 1
