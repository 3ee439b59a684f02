"""The data browser's web server: a read-only JSON API under /api/ and one static page.

Run it with `marin-lab browse --prefix P` (or `python -m marin_lab.browser.server --prefix P`).
It binds 127.0.0.1 by default, registers GET routes only, refuses paths outside its roots (403),
answers a missing thing with 404 and a malformed query with 400. Storage is read in a pool of
worker threads of the server's own (`REQUEST_THREADS`), so one slow bucket read does not stall
other requests; an answer that takes longer than `REQUEST_TIMEOUT_S` is given up with 504.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import ipaddress
import json
import logging
import socket
import sys
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import resources
from typing import Any

from aiohttp import web

from marin_lab.browser import command, evals
from marin_lab.browser.compare import experiments_diff, training_runs
from marin_lab.browser.cost import experiment_cost
from marin_lab.browser.errors import BadRequestError, BrowserError, NotFoundError, TimeoutAnswerError
from marin_lab.browser.logs import read_log
from marin_lab.browser.metrics import read_metrics, read_results
from marin_lab.browser.paths import Roots
from marin_lab.browser.preview import preview
from marin_lab.browser.records import Browser
from marin_lab.errors import MarinLabError
from marin_lab.execution.review.prices import PriceTable
from marin_lab.io.confined import RefusedPathError
from marin_lab.io.fs import normalize_prefix
from marin_lab.io.secrets import redact_logs, scrub_json

logger = logging.getLogger(__name__)

DEFAULT_HOST = command.DEFAULT_HOST
DEFAULT_PORT = command.DEFAULT_PORT
MAX_LIMIT = 500
MAX_COMPARED_EXPERIMENTS = 8
"""The compare page's runs come from at most this many experiments besides its own."""
# Each page's work is bounded (see preview_jsonl, preview_arrays, metrics); these bound the rest:
# a slow or hung storage read holds one of many threads, and its request is answered anyway.
REQUEST_THREADS = 64
REQUEST_TIMEOUT_S = 120.0
STATIC_FILES = {
    "index.html": "text/html",
    "app.css": "text/css",
    "app.js": "text/javascript",
    "compare.js": "text/javascript",
    "evals.js": "text/javascript",
    "cost.js": "text/javascript",
    # Vendored unmodified, each with its licence (scripts/vendor_charts.sh re-vendors Plot and d3).
    "dagre.min.js": "text/javascript",
    "dagre-LICENSE.txt": "text/plain",
    "d3.min.js": "text/javascript",
    "d3-LICENSE.txt": "text/plain",
    "plot.umd.min.js": "text/javascript",
    "plot-LICENSE.txt": "text/plain",
}
# Data is rendered with textContent, and this policy is the second wall: no inline or foreign
# script can run even if some string reached the DOM as markup.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
_LOOPBACK_NAMES = {"localhost", "127.0.0.1", "::1", "[::1]"}

BROWSER_KEY: web.AppKey[Browser] = web.AppKey("browser", Browser)
LOOPBACK_KEY: web.AppKey[bool] = web.AppKey("loopback_only", bool)
POOL_KEY: web.AppKey[ThreadPoolExecutor] = web.AppKey("pool", ThreadPoolExecutor)


def _json(value: Any, status: int = 200) -> web.Response:
    # The last wall: whatever a reader returned (a record, a page of a file, a log, an error
    # message), every string leaves with the secret values and credential shapes scrubbed.
    value = scrub_json(value)
    text = json.dumps(value, ensure_ascii=False, default=str, allow_nan=False)
    try:
        body = text.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate (valid in JSON, "\ud800") has no UTF-8 form: send the escaped form.
        body = json.dumps(value, ensure_ascii=True, default=str, allow_nan=False).encode("ascii")
    return web.Response(
        body=body,
        status=status,
        content_type="application/json",
        charset="utf-8",
        headers={"Cache-Control": "no-store"},
    )


async def _in_thread(request: web.Request, fn: Callable[..., Any], *args: Any) -> Any:
    """Run blocking storage work in the server's pool, giving up on the answer after the timeout."""
    loop = asyncio.get_running_loop()
    future = loop.run_in_executor(request.app[POOL_KEY], functools.partial(fn, *args))
    try:
        return await asyncio.wait_for(future, REQUEST_TIMEOUT_S)
    except TimeoutError:
        raise TimeoutAnswerError(
            f"{request.path} took longer than {REQUEST_TIMEOUT_S:.0f} s (slow or unresponsive storage?); "
            "try again, or check that the storage answers"
        ) from None


def _is_loopback_host(host_header: str) -> bool:
    host = host_header.rsplit(":", 1)[0] if not host_header.endswith("]") else host_header
    if host.startswith("[") and "]" in host:
        host = host[1 : host.index("]")]
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@web.middleware
async def _guard(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]):
    # A server on 127.0.0.1 can still be reached by a page on another site through DNS
    # rebinding; such a request carries that site's name in Host, so refuse non-loopback names.
    if request.app[LOOPBACK_KEY] and not _is_loopback_host(request.host or ""):
        return _json(
            {"error": f"host {request.host!r} refused: the browser serves localhost only", "status": 403}, status=403
        )
    try:
        response = await handler(request)
    except BrowserError as err:
        response = _json({"error": str(err), "status": err.status}, status=err.status)
    except RefusedPathError as err:  # the shared reader's refusal, reached through a reader below the browser
        response = _json({"error": str(err), "status": 403}, status=403)
    except web.HTTPException as err:
        if not request.path.startswith("/api/"):
            raise
        response = _json({"error": err.reason, "status": err.status}, status=err.status)
    except Exception as err:  # a bug, not bad data: say so, and keep serving
        logger.exception("browser: %s %s failed", request.method, request.path_qs)
        response = _json({"error": f"internal error while serving {request.path}: {err!r}", "status": 500}, status=500)
    response.headers.setdefault("Content-Security-Policy", CSP)
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    response.headers.setdefault("Referrer-Policy", "no-referrer")
    response.headers.setdefault("X-Frame-Options", "DENY")
    return response


def _limit(request: web.Request, default: int) -> int:
    raw = request.query.get("limit")
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError as err:
        raise BadRequestError(f"limit {raw!r} is not an integer") from err
    if not 1 <= value <= MAX_LIMIT:
        raise BadRequestError(f"limit {value} is outside 1..{MAX_LIMIT}")
    return value


def _browser(request: web.Request) -> Browser:
    return request.app[BROWSER_KEY]


async def _health(request: web.Request) -> web.Response:
    b = _browser(request)
    return _json({"ok": True, "prefix": b.prefix, "roots": list(b.roots.urls)})


async def _experiments(request: web.Request) -> web.Response:
    return _json(
        {"prefix": _browser(request).prefix, "experiments": await _in_thread(request, _browser(request).experiments)}
    )


async def _experiment(request: web.Request) -> web.Response:
    return _json(await _in_thread(request, _browser(request).experiment, request.match_info["exp_id"]))


async def _cost(request: web.Request) -> web.Response:
    return _json(await _in_thread(request, experiment_cost, _browser(request), request.match_info["exp_id"]))


async def _step(request: web.Request) -> web.Response:
    path = request.query.get("path", "")
    return _json(await _in_thread(request, _browser(request).step, path, request.query.get("exp") or None))


async def _file(request: web.Request) -> web.Response:
    b = _browser(request)
    limit = _limit(request, 25)
    return _json(
        await _in_thread(
            request, preview, b.roots, request.query.get("path", ""), request.query.get("cursor") or None, limit
        )
    )


async def _metrics(request: web.Request) -> web.Response:
    b = _browser(request)
    step_dir = b.roots.resolve(request.query.get("path", ""))
    metric = request.query.get("metric") or None  # one series alone (the compare view)
    metrics, results = await asyncio.gather(
        _in_thread(request, read_metrics, b.roots, step_dir, metric),
        _in_thread(request, read_results, b.roots, step_dir),
    )
    return _json({"output_path": step_dir, "metrics": metrics, "results": results})


def _int_query(request: web.Request, name: str) -> int | None:
    raw = request.query.get(name)
    if raw in (None, ""):
        return None
    try:
        return int(raw)
    except ValueError:
        raise BadRequestError(f"{name} {raw!r} is not an integer") from None


async def _log(request: web.Request) -> web.Response:
    b = _browser(request)
    step_dir = b.roots.resolve(request.query.get("path", ""))
    return _json(
        await _in_thread(
            request, read_log, b.roots, step_dir, _int_query(request, "attempt"), _int_query(request, "offset")
        )
    )


async def _compare(request: web.Request) -> web.Response:
    others = request.query.getall("with", [])  # runs of other experiments beside this one's
    if len(others) > MAX_COMPARED_EXPERIMENTS:
        raise BadRequestError(f"{len(others)} experiments in with=; compare at most {MAX_COMPARED_EXPERIMENTS}")
    return _json(await _in_thread(request, training_runs, _browser(request), request.match_info["exp_id"], others))


async def _diff(request: web.Request) -> web.Response:
    m = request.match_info
    return _json(await _in_thread(request, experiments_diff, _browser(request), m["exp_id"], m["other_id"]))


async def _evals(request: web.Request) -> web.Response:
    qs = request.query
    return _json(
        await _in_thread(
            request,
            evals.leaderboard,
            _browser(request),
            qs.get("tasks") or None,
            qs.get("metric") or None,
            qs.get("rank_on") or None,
        )
    )


async def _evals_compare(request: web.Request) -> web.Response:
    qs = request.query
    return _json(
        await _in_thread(
            request,
            evals.compare,
            _browser(request),
            qs.get("a"),
            qs.get("b"),
            qs.get("tasks") or None,
            qs.get("metric") or None,
        )
    )


async def _evals_samples(request: web.Request) -> web.Response:
    qs = request.query
    return _json(
        await _in_thread(
            request,
            evals.samples,
            _browser(request),
            qs.get("run"),
            qs.get("task"),
            qs.get("show") or "all",
            qs.get("other") or None,
            _int_query(request, "cursor"),
            _limit(request, 25),
            qs.get("metric") or None,
        )
    )


async def _evals_run(request: web.Request) -> web.Response:
    return _json(await _in_thread(request, evals.run_detail, _browser(request), request.query.get("path", "")))


async def _evals_training(request: web.Request) -> web.Response:
    return _json(await _in_thread(request, evals.training, _browser(request), request.query.get("tasks") or None))


async def _api_not_found(request: web.Request) -> web.Response:
    raise NotFoundError(f"no API route {request.path}; see docs/browser.md for the routes")


def _static_text(name: str) -> bytes:
    return resources.files("marin_lab.browser").joinpath("static", name).read_bytes()


async def _index(request: web.Request) -> web.Response:
    return web.Response(body=_static_text("index.html"), content_type="text/html", charset="utf-8")


async def _favicon(request: web.Request) -> web.Response:
    # Browsers ask for it on every page; an empty answer keeps their consoles clean.
    return web.Response(status=204)


async def _static(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    if name not in STATIC_FILES:
        raise web.HTTPNotFound()
    return web.Response(body=_static_text(name), content_type=STATIC_FILES[name], charset="utf-8")


def make_app(
    prefix: str, roots: list[str] | None = None, *, loopback_only: bool = True, prices: PriceTable | None = None
) -> web.Application:
    """The aiohttp application serving `prefix`. The browser may read the prefix and each of
    `roots` (more folders, `--root`); the prefix is the first root, against which relative paths
    resolve; `prices` (default: the list prices) price the cost columns."""
    prefix = normalize_prefix(prefix)  # a relative prefix is the working folder's, not the first root's
    confined = Roots.of([prefix, *(roots or [])])
    app = web.Application(middlewares=[_guard])
    app[BROWSER_KEY] = Browser(prefix, confined, prices=prices)
    app[LOOPBACK_KEY] = loopback_only
    app[POOL_KEY] = ThreadPoolExecutor(max_workers=REQUEST_THREADS, thread_name_prefix="browser-request")

    async def _stop_pool(app: web.Application) -> None:
        # Threads stuck on storage cannot be interrupted; do not wait for them.
        app[POOL_KEY].shutdown(wait=False, cancel_futures=True)

    app.on_cleanup.append(_stop_pool)
    # GET only: the browser never writes, so there is no route that could.
    routes = {
        "/": _index,
        "/static/{name}": _static,
        "/favicon.ico": _favicon,
        "/api/health": _health,
        "/api/experiments": _experiments,
        "/api/experiments/{exp_id}": _experiment,
        "/api/experiments/{exp_id}/runs": _compare,
        "/api/experiments/{exp_id}/cost": _cost,
        "/api/experiments/{exp_id}/diff/{other_id}": _diff,
        "/api/step": _step,
        "/api/file": _file,
        "/api/metrics": _metrics,
        "/api/log": _log,
        "/api/evals": _evals,
        "/api/evals/compare": _evals_compare,
        "/api/evals/samples": _evals_samples,
        "/api/evals/training": _evals_training,
        "/api/evals/run": _evals_run,
        "/api/{tail:.*}": _api_not_found,
    }
    for path, handler in routes.items():  # in this order: the catch-all API route comes last
        app.router.add_get(path, handler)
    return app


def _is_loopback_bind(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def serve(
    prefix: str,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    roots: list[str] | None = None,
    prices: PriceTable | None = None,
) -> None:
    """Serve the browser for `prefix` until interrupted."""
    if not _is_loopback_bind(host):
        logger.warning("browser: binding %s exposes every file under %s to the network", host, prefix)
    app = make_app(prefix, roots, loopback_only=_is_loopback_bind(host), prices=prices)
    # Bound here, before printing: the address printed is the one served (--port 0 picks one), and a
    # port in use is an OSError for the caller instead of a traceback from inside the event loop.
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # restart at once; a live listener still refuses
    try:
        sock.bind(address)
        sock.listen(128)  # connections made as soon as the address is printed wait in the backlog
    except OSError:
        sock.close()
        raise
    shown = f"[{host}]" if ":" in host else host
    print(f"marin-lab browser: http://{shown}:{sock.getsockname()[1]}/  (prefix {app[BROWSER_KEY].prefix})", flush=True)
    web.run_app(app, sock=sock, print=None, access_log=None)


@dataclass
class RunningServer:
    """A browser server on a background thread (tests, benchmarks); `stop()` shuts it down."""

    url: str
    _loop: asyncio.AbstractEventLoop
    _runner: web.AppRunner
    _thread: threading.Thread

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)

    def __enter__(self) -> RunningServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_in_thread(
    prefix: str,
    roots: list[str] | None = None,
    host: str = DEFAULT_HOST,
    port: int = 0,
    prices: PriceTable | None = None,
) -> RunningServer:
    """Start a server on a free port (port=0) in a daemon thread and return once it listens."""
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(
        make_app(prefix, roots, loopback_only=_is_loopback_bind(host), prices=prices), access_log=None
    )
    ready: dict[str, Any] = {}
    started = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(runner.setup())
            site = web.TCPSite(runner, host, port)
            loop.run_until_complete(site.start())
            ready["port"] = runner.addresses[0][1]
        except BaseException as err:  # hand the failure to the caller's thread
            ready["error"] = err
            started.set()
            return
        started.set()
        loop.run_forever()
        loop.close()

    thread = threading.Thread(target=run, name="marin-lab-browser", daemon=True)
    thread.start()
    started.wait(timeout=60)
    if "error" in ready:
        raise ready["error"]
    if "port" not in ready:
        raise RuntimeError(f"the browser server for {prefix} did not start within 60 s")
    return RunningServer(f"http://{host}:{ready['port']}", loop, runner, thread)


def main(argv: list[str] | None = None) -> int:
    """`python -m marin_lab.browser.server`: the same parser and behaviour as `marin-lab browse`."""
    parser = command.add_arguments(
        argparse.ArgumentParser(prog="marin-lab browse", description="Browse experiments, steps and data.")
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    redact_logs()
    try:
        return command.run(args)
    except MarinLabError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
