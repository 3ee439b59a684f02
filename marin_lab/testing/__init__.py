"""Doubles for tests, benchmarks and local drills: tiny training setups, synthetic Hugging Face
checkpoints, a local Ray cluster that looks like TPU slices, toy slice workloads and an in-process
Cloud TPU API. The product never imports this package (tests/unit/project/test_layering.py holds it on top)."""
