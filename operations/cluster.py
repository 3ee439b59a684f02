"""Bring a TPU cluster up, check it, tear it down: `python operations/cluster.py up --config ...`.

The same commands as `marin-lab cluster ...`; the implementation lives in marin_lab.cluster.cli
so both entry points behave identically. See docs/cluster.md.
"""

import logging
import sys

from marin_lab.cluster.cli import main

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    sys.exit(main(sys.argv[1:]))
