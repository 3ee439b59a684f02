"""Boolean command-line flags that work the same everywhere: `--flag`, `--flag true`, `--flag=false`.

Experiment scripts (draccus) need a value and argparse's `store_true` refuses one; users type
both. `add_bool_flag` gives argparse the first behaviour; `bare_bool_flags` rewrites a bare
`--flag` into `--flag true` before draccus sees it.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Sequence

TRUE = ("true", "yes", "1", "on")
FALSE = ("false", "no", "0", "off")


def parse_bool(text: str) -> bool:
    value = text.strip().lower()
    if value in TRUE:
        return True
    if value in FALSE:
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not a boolean; use true or false (or give the flag alone)")


def add_bool_flag(parser: argparse.ArgumentParser, name: str, help: str) -> None:
    """`--name` (true), `--name true|false`, `--name=true|false`; default false."""
    parser.add_argument(name, nargs="?", const=True, default=False, type=parse_bool, metavar="true|false", help=help)


def bare_bool_flags(argv: Sequence[str], names: Iterable[str]) -> list[str]:
    """argv with each bare boolean `--name` (last, or followed by another flag) given the value true."""
    flags = {f"--{n}" for n in names}
    out: list[str] = []
    for i, arg in enumerate(argv):
        out.append(arg)
        if arg in flags and (i + 1 == len(argv) or argv[i + 1].startswith("--")):
            out.append("true")
    return out
