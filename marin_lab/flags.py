"""Command-line flags that work the same everywhere: booleans (`--flag`, `--flag true`,
`--flag=false`) and the store's prefix (`--prefix PATH`).

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


def add_prefix_arguments(parser: argparse.ArgumentParser, *, required: bool = False) -> None:
    """The store prefix as `--prefix PATH`, as every command spells it, or as the first word after the
    command (`marin-lab status PATH`, `marin-lab gc PATH`, as these two always took it).
    `resolve_prefix_arguments` makes the two one `args.prefix` after parsing."""
    where = "required" if required else "default: $MARIN_PREFIX, else marin_store at the project root"
    parser.add_argument("prefix_word", nargs="?", metavar="prefix", help=f"the store's prefix ({where})")
    parser.add_argument("--prefix", help="the same, spelt as every other command takes it")
    parser.set_defaults(prefix_required=required, prefix_parser=parser)


def resolve_prefix_arguments(args: argparse.Namespace) -> None:
    """`args.prefix` from either spelling of `add_prefix_arguments`; a usage error (exit 2) when the
    two name different prefixes, or when a command that needs one has neither."""
    if not hasattr(args, "prefix_word"):
        return
    parser = args.prefix_parser
    word, flag = args.prefix_word, args.prefix
    if word is not None and flag is not None and word != flag:
        parser.error(f"the prefix is given twice ({word} and --prefix {flag}): give it once")
    args.prefix = flag if flag is not None else word
    if args.prefix is None and args.prefix_required:
        parser.error("the prefix is required: give it as --prefix PATH")
    del args.prefix_word, args.prefix_required, args.prefix_parser
