"""`marin-lab gc PREFIX [--older_than 14d] [--yes]`: the storage under a prefix that nobody needs
(unreferenced, failed, abandoned and scratch folders), listed with sizes and deleted only with
`--yes` (garbage.py); `marin-lab forget EXPERIMENT` drops an abandoned experiment's record so
that what only it named becomes collectable (forget.py). A tool over the executor's records and
leases: the executor never imports it.
"""

from marin_lab.gc.forget import add_parser as add_forget_parser
from marin_lab.gc.garbage import Candidate, GcError, add_parser, delete, find_garbage, parse_age

__all__ = ["Candidate", "GcError", "add_forget_parser", "add_parser", "delete", "find_garbage", "parse_age"]
