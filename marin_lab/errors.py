"""The root of marin_lab's error tree, importable from anywhere (standard library only).

Each package adds its own branch: `marin_lab.execution.errors` (the executor's tree, drawn there),
`marin_lab.processing.errors`, `marin_lab.training.errors`, `marin_lab.evaluation`,
`marin_lab.browser.errors`, `marin_lab.cluster.errors`. Step functions subclass this root without
importing the executor.
"""


class MarinLabError(Exception):
    """Root of every error marin_lab raises on purpose."""
