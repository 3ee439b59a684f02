"""The on-disk store: where a prefix keeps step outputs, their records and experiment records.

One owner for the layout (`layout`): the default prefix, the record file names, the experiments
folder and the status vocabulary. Everything that reads or writes the store (the executor,
`marin-lab`, the data browser) takes these names from here, so the listings cannot drift apart.
"""

from marin_lab.store.layout import (
    CORRUPT,
    DEFAULT_PREFIX,
    EXPERIMENTS_DIR,
    INFO_FILE,
    LEASE_FILE,
    MISSING,
    RECORD_FILES,
    STATUS_FILE,
    Status,
    default_prefix,
    experiment_record_url,
    experiment_runs_dir,
    experiments_dir,
    info_url,
    run_record_name,
    status_url,
)

__all__ = [
    "CORRUPT",
    "DEFAULT_PREFIX",
    "EXPERIMENTS_DIR",
    "INFO_FILE",
    "LEASE_FILE",
    "MISSING",
    "RECORD_FILES",
    "STATUS_FILE",
    "Status",
    "default_prefix",
    "experiment_record_url",
    "experiment_runs_dir",
    "experiments_dir",
    "info_url",
    "run_record_name",
    "status_url",
]
