"""Experiment files and their shared recipe helpers (installed with marin_lab, so
`python experiments/x.py` can import `experiments.defaults` from anywhere)."""
