"""Marin's spellings, beside marin_lab's core: what a Marin (Ray-era) experiment file or tool reads.

The core (`marin_lab.execution`, `marin_lab.training`, ...) never imports this package; it sits
above them (tests/unit/project/test_layering.py) and adapts their objects to Marin's names:

- `marin_lab.marin.executor`: Marin's `Executor` (marin_lab's, plus `steps`, `output_paths`,
  `configs`, `versions`, `version_strs` and `dependencies` for its last plan), `MarinView`, and
  the executor internals some tools reach for (`StatusFile`, `Lease`, `HEARTBEAT_TIMEOUT`,
  `collect_dependencies_and_version`, `get_info_path`, `get_status_path`).
- `marin_lab.marin.resources`: `CpuOnlyConfig`, `GpuConfig`, `TpuPodConfig` (Marin's
  `marin.resources`; also importable as `marin_lab.resources`).
- `marin_lab.marin.models`: Marin's Llama presets and tokenizer names (`experiments.llama` and
  `experiments.marin_models` re-export them).

Marin's current API (June 2026 on: lazy ArtifactSteps addressed by `name@version`), module for
module: `lazy`, `artifact`, `fingerprint`, `build_context`, `step_spec`, `step_runner`,
`step_status`, `remote`, `cli` (Marin's `marin.experiment.cli`), `namespacing`, `provenance` and
`filesystem` (rigging's), and `resources.ResourceConfig` (Fray's). They run on marin_lab's executor
(`step_runner`, with `thread_backend` for Marin's in-thread placement).

Submodules are imported by name; this file imports none of them, so `marin_lab.resources` does not
load JAX through `models.py`.
See docs/coming_from_marin.md.
"""
