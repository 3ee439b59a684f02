"""`marin-lab browse`: its one argument parser, used by `marin-lab` and `python -m marin_lab.browser.server`.

Importing this does not import the server (aiohttp): `marin_lab.browser.serve` loads it on first use.
"""

from __future__ import annotations

import argparse
import errno

from marin_lab import browser
from marin_lab.errors import MarinLabError
from marin_lab.execution.review.prices import load_prices
from marin_lab.store.layout import default_prefix

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The options of `browse`; `run(args)` serves what they say."""
    parser.add_argument(
        "--prefix",
        help="the executor prefix to browse (local folder or gs://bucket/path); "
        "default $MARIN_PREFIX, else marin_store at the project root",
    )
    parser.add_argument("--host", default=DEFAULT_HOST, help=f"address to bind (default {DEFAULT_HOST})")
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"default {DEFAULT_PORT}; 0 picks a free port (printed)"
    )
    parser.add_argument(
        "--root",
        action="append",
        default=None,
        help="another folder the browser may read besides the prefix (repeatable)",
    )
    parser.add_argument(
        "--prices",
        help="a price table (JSON, or TOML by its .toml name) for the cost columns; "
        'default: the list prices (docs/executor.md, "Cost")',
    )
    parser.set_defaults(func=run)
    return parser


def add_parser(sub: argparse._SubParsersAction) -> None:
    add_arguments(
        sub.add_parser("browse", help="serve the data browser for a prefix (read-only, 127.0.0.1 by default)")
    )


def run(args: argparse.Namespace) -> int:
    """Serve until interrupted; a port in use or an address that cannot be bound is one clear line."""
    try:
        browser.serve(
            default_prefix(args.prefix),
            host=args.host,
            port=args.port,
            roots=args.root or None,
            prices=load_prices(args.prices),
        )
    except OSError as err:
        if err.errno == errno.EADDRINUSE:
            raise MarinLabError(
                f"port {args.port} on {args.host} is in use (another browser?); pass --port N, "
                "or --port 0 for any free port"
            ) from None
        raise MarinLabError(f"cannot serve on {args.host}:{args.port}: {err.strerror or err}") from None
    return 0
