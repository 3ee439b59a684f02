"""Every error class marin_lab defines crosses a process boundary intact (pickle round trip).

Step functions run in process pools and Ray workers; an error that cannot be unpickled reaches the
driver as `BrokenProcessPool: terminated abruptly` or a bare Ray wrapper, without its message.
"""

from __future__ import annotations

import importlib
import inspect
import pickle
import pkgutil

import pytest

import marin_lab


def _error_classes() -> list[type[BaseException]]:
    for module in pkgutil.walk_packages(marin_lab.__path__, "marin_lab."):
        importlib.import_module(module.name)
    found: dict[str, type[BaseException]] = {}
    pending = [BaseException]
    while pending:
        cls = pending.pop()
        for sub in cls.__subclasses__():
            pending.append(sub)
            if sub.__module__.startswith("marin_lab"):
                found[f"{sub.__module__}.{sub.__qualname__}"] = sub
    return [found[name] for name in sorted(found)]


def _instance(cls: type[BaseException]) -> BaseException:
    """An instance built from its own signature: ints, floats and strings where annotated."""
    try:
        params = inspect.signature(cls).parameters.values()
    except ValueError:  # the built-in __init__: a message is all it takes
        params = []
    args = []
    for param in params:
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD) or param.default is not param.empty:
            continue
        annotation = str(param.annotation)
        args.append(3 if "int" in annotation else 1.5 if "float" in annotation else f"<{param.name}>")
    return cls(*args) if args else cls("step 'x': something went wrong; do this")


ERROR_CLASSES = _error_classes()


def test_the_hierarchy_is_found():
    names = {cls.__name__ for cls in ERROR_CLASSES}
    assert {"MarinLabError", "BadRecordError", "StepFailedError", "BrowserError", "ProcessingError"} <= names


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda c: f"{c.__module__}.{c.__qualname__}")
def test_error_survives_a_pickle_round_trip(cls):
    err = _instance(cls)
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is cls
    assert str(again) == str(err) and again.args == err.args
    assert repr(vars(again)) == repr(vars(err))
