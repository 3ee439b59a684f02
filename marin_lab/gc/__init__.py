"""`marin-lab gc PREFIX [--older_than 14d] [--yes]`: the storage under a prefix that nobody needs
(unreferenced, failed, abandoned and scratch folders), listed with sizes and deleted only with
`--yes` (garbage.py). A tool over the executor's records and leases: the executor never imports it.
"""

from marin_lab.gc.garbage import Candidate, GcError, add_parser, delete, find_garbage, parse_age

__all__ = ["Candidate", "GcError", "add_parser", "delete", "find_garbage", "parse_age"]
