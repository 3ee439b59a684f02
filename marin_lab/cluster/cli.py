"""`marin-lab cluster render|up|status|down`: one cluster config in, a Ray cluster and TPU slices out.

    up      render the Ray cluster config, `ray up` it, create the config's queued resources and
            wait for them to be ACTIVE
    status  the queued resources' states (PREEMPTED / FAILED are called out; exit code 3)
    down    delete the queued resources and `ray down` the cluster
    render  only write the Ray cluster config (./infra/<cluster_name>.yaml by default)

`--dry_run` prints the exact Ray commands and TPU API requests and touches nothing; it needs no
credentials (the TPU client is built with AnonymousCredentials and never called).

`marin-lab compile` (a training step compiled for its TPU topology) is `compile_main`, from
compile_command.py: the top-level command hands both TPU commands here, so neither the TPU client
nor the compiler is imported by the other commands.
"""

from __future__ import annotations

import argparse
import json
import logging
import shlex
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from marin_lab.cluster.compile_command import main as compile_main
from marin_lab.cluster.config import ClusterConfig, dump_ray_config, load_cluster_config
from marin_lab.cluster.errors import ClusterError, PreemptedError
from marin_lab.cluster.provision import TpuProvisioner, make_tpu_client
from marin_lab.flags import add_bool_flag

logger = logging.getLogger(__name__)


def default_ray_config(cluster_name: str) -> Path:
    """Where a rendered Ray config goes: the working directory's infra/ (as in this repository), else
    the working directory itself; never beside the installed package."""
    infra = Path("infra")
    return (infra if infra.is_dir() else Path(".")) / f"{cluster_name}.yaml"


EXIT_DEGRADED = 3


def startup_script(config: ClusterConfig, head_ip: str) -> str:
    """What a directly provisioned TPU host runs at boot: join the Ray cluster in the cluster image."""
    return "\n".join(
        [
            "#!/bin/bash",
            "set -euo pipefail",
            f"gcloud auth configure-docker {config.region}-docker.pkg.dev --quiet",
            f"docker pull {shlex.quote(config.image)}",
            "docker rm -f marin_lab 2>/dev/null || true",
            f"docker run -d --name marin_lab --privileged --net=host --ulimit memlock=-1:-1 -v /tmp:/tmp "
            f"-e MARIN_PREFIX={shlex.quote(config.bucket or '')} {shlex.quote(config.image)} "
            f"ray start --address={head_ip}:6379 --object-manager-port=8076 --block",
        ]
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="marin-lab cluster", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (
        ("up", "bring the cluster up"),
        ("status", "show queued resources"),
        ("down", "tear the cluster down"),
        ("render", "write the Ray cluster config"),
    ):
        cmd = sub.add_parser(name, help=text)
        cmd.add_argument("--config", required=True, help="cluster config, e.g. infra/clusters/us-west4.yaml")
        add_bool_flag(cmd, "--dry_run", "print the Ray commands and TPU API requests only")
        cmd.add_argument(
            "--ray_config",
            default=None,
            help="where the rendered Ray config goes (default: infra/<cluster_name>.yaml under "
            "the working directory if it has an infra/ folder, else <cluster_name>.yaml there)",
        )
        cmd.add_argument("--api_endpoint", default=None, help=argparse.SUPPRESS)  # an emulator, for drills
        if name == "up":
            add_bool_flag(cmd, "--no_ray", "only provision the queued resources")
            add_bool_flag(cmd, "--no_wait", "do not wait for queued resources to be ACTIVE")
            cmd.add_argument("--timeout_s", type=float, default=3600.0, help="how long to wait for ACTIVE")
            cmd.add_argument("--head_ip", default=None, help="Ray head address for directly provisioned slices")
        if name == "down":
            add_bool_flag(cmd, "--keep_ray", "only delete the queued resources")
        if name == "status":
            add_bool_flag(cmd, "--json", "print JSON")
    return parser


def main(
    argv: Sequence[str] | None = None,
    *,
    client: Any | None = None,
    run: Callable[..., Any] = subprocess.run,
    emit: Callable[[str], None] = print,
    sleep: Callable[[float], None] | None = None,
) -> int:
    """Entry point; returns the exit code. `client`, `run`, `emit` and `sleep` are injectable for tests."""
    args = _parser().parse_args(argv)
    try:
        config = load_cluster_config(args.config)
        if client is None and args.api_endpoint:
            import grpc

            client = make_tpu_client(channel=grpc.insecure_channel(args.api_endpoint))
        kwargs: dict = {"client": client, "dry_run": args.dry_run, "emit": emit}
        if sleep is not None:
            kwargs["sleep"] = sleep
        provisioner = TpuProvisioner.for_cluster(config, **kwargs)
        ray_config = Path(args.ray_config) if args.ray_config else default_ray_config(config.cluster_name)
        return _COMMANDS[args.command](args, config, provisioner, ray_config, run, emit)
    except (ClusterError, PreemptedError) as err:
        emit(f"error: {err}")
        return 2


def _ray(cmd: list[str], args: argparse.Namespace, run: Callable[..., Any], emit: Callable[[str], None]) -> Any:
    if args.dry_run:
        emit("$ " + shlex.join(cmd))
        return None
    logger.info("running %s", shlex.join(cmd))
    return run(cmd, check=True, capture_output=cmd[1] == "get-head-ip", text=True)


def _render(args, config, provisioner, ray_config: Path, run, emit) -> int:
    text = dump_ray_config(config)
    if args.dry_run:
        emit(text)
    else:
        ray_config.write_text(text)
        emit(f"wrote {ray_config}")
    return 0


def _up(args, config, provisioner, ray_config: Path, run, emit) -> int:
    _render(args, config, provisioner, ray_config, run, emit)
    head_ip = args.head_ip
    if not args.no_ray:
        _ray(["ray", "up", "-y", "--no-config-cache", str(ray_config)], args, run, emit)
        if config.queued_resources and head_ip is None:
            out = _ray(["ray", "get-head-ip", str(ray_config)], args, run, emit)
            head_ip = out.stdout.strip().splitlines()[-1] if out is not None else None
    for spec in config.queued_resources:
        script = startup_script(config, head_ip or "<ray-head-ip>") if (head_ip or args.dry_run) else None
        provisioner.create(
            spec,
            runtime_version=config.runtime_version,
            labels={"marin-cluster": config.cluster_name},
            startup_script=script,
        )
    if args.dry_run or args.no_wait:
        return 0
    for spec in config.queued_resources:
        status = provisioner.wait_active(spec.name, timeout_s=args.timeout_s)
        emit(f"{spec.name}: ACTIVE ({status.slices} x {status.tpu})")
    return 0


def _status(args, config, provisioner, ray_config: Path, run, emit) -> int:
    statuses = provisioner.list()
    if args.dry_run:
        return 0
    if args.json:
        emit(json.dumps([s.to_json() for s in statuses], indent=2))
    else:
        emit(f"cluster {config.cluster_name} ({config.zone}): {len(statuses)} queued resource(s)")
        for s in statuses:
            flag = " PREEMPTED" if s.preempted else (" FAILED: " + (s.error or "") if s.state == "FAILED" else "")
            nodes = ", ".join(f"{n}={st}" for n, st in s.nodes)
            emit(
                f"  {s.name:<28} {s.state:<22} {s.slices} x {s.tpu} {'spot' if s.spot else 'guaranteed'}"
                f"{flag}{'  [' + nodes + ']' if nodes else ''}"
            )
        emit(f"Ray: `ray status` on the head (`ray attach {ray_config}`), dashboard via `ray dashboard {ray_config}`")
    degraded = any(s.preempted or s.state == "FAILED" for s in statuses)
    return EXIT_DEGRADED if degraded else 0


def _down(args, config, provisioner, ray_config: Path, run, emit) -> int:
    for spec in config.queued_resources:
        provisioner.delete(spec.name)
    if not args.keep_ray:
        if not args.dry_run and not ray_config.exists():
            _render(args, config, provisioner, ray_config, run, emit)
        _ray(["ray", "down", "-y", str(ray_config)], args, run, emit)
    return 0


_COMMANDS = {"up": _up, "status": _status, "down": _down, "render": _render}


if __name__ == "__main__":  # pragma: no cover
    logging.basicConfig(level=logging.INFO)
    sys.exit(main())


__all__ = ["EXIT_DEGRADED", "compile_main", "default_ray_config", "main"]
