"""A driver process for the executor tests: runs the five-step reference DAG.

python tests/drive_dag.py PREFIX LOG SLEEP_S [executor_main flags...]
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from marin_lab.execution import executor_main  # noqa: E402
from tests.executor_steps import five_step_dag  # noqa: E402

if __name__ == "__main__":
    prefix, log, sleep_s, *flags = sys.argv[1:]
    executor_main(
        five_step_dag(log_path=log, sleep_s=float(sleep_s)),
        description="test driver",
        args=["--prefix", prefix, *flags],
    )
