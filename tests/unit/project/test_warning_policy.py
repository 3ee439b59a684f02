"""A warning attributed to our own code fails the test that caused it; libraries' warnings do not
(pyproject.toml, [tool.pytest.ini_options] filterwarnings)."""

from __future__ import annotations

import warnings

import pytest


@pytest.mark.parametrize(
    "module",
    [
        "marin_lab",
        "marin_lab.execution.executor",
        "experiments.defaults",
        "operations.sweep",
        "tests.conftest",
        "test_warning_policy",
        "conftest",
    ],
)
@pytest.mark.parametrize("category", [UserWarning, DeprecationWarning, RuntimeWarning, FutureWarning])
def test_a_warning_from_our_code_is_an_error(module, category):
    with pytest.raises(category, match="ours"):
        warnings.warn_explicit("ours", category, f"{module.replace('.', '/')}.py", 1, module=module)


def test_a_warning_raised_here_is_an_error():
    with pytest.raises(UserWarning, match="from a test"):
        warnings.warn("from a test", UserWarning, stacklevel=1)


@pytest.mark.parametrize("module", ["numpy.lib", "jax._src.api", "marin_lab_extras", "experimentsx", "pytest_foo"])
@pytest.mark.parametrize("category", [UserWarning, DeprecationWarning, RuntimeWarning])
def test_a_library_warning_is_not(module, category):
    with warnings.catch_warnings(record=True) as seen:  # keeps the filters; records instead of printing
        warnings.warn_explicit("theirs", category, f"{module.replace('.', '/')}.py", 1, module=module)
    assert all(w.message.args == ("theirs",) for w in seen)
