"""Every exception dbscheduler raises on purpose is a :class:`SchedulerError` in ``errors.py``.

A caller catches ``SchedulerError`` and knows it has every refusal of the library; a reader finds
them all in one module. The old import paths keep working (re-exports), and the errors that
were ``RuntimeError``/``ValueError`` before they had a name still are.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import dbscheduler
from dbscheduler import errors

PACKAGE = Path(dbscheduler.__file__).parent

ALLOWED_ELSEWHERE = {
    # Raised and caught inside the executor: it never leaves the library.
    "dbscheduler._engine.executor._LeaseExpired",
    # click's way to end a command with exit code 1 and one line on stderr.
    "dbscheduler.cli.target.OperationFailed",
}


def _modules() -> list[str]:
    names = [
        info.name for info in pkgutil.walk_packages([str(PACKAGE)], "dbscheduler.")
        if "_migrations" not in info.name and "contrib.django" not in info.name
    ]
    return ["dbscheduler", *names]


def test_every_exception_class_lives_in_errors() -> None:
    elsewhere = []
    for name in _modules():
        module = importlib.import_module(name)
        for cls_name, cls in inspect.getmembers(module, inspect.isclass):
            if (issubclass(cls, BaseException) and cls.__module__ == name
                    and name != "dbscheduler.errors"):
                elsewhere.append(f"{name}.{cls_name}")
    assert set(elsewhere) <= ALLOWED_ELSEWHERE, sorted(set(elsewhere) - ALLOWED_ELSEWHERE)


def test_every_error_derives_from_scheduler_error() -> None:
    defined = [cls for _, cls in inspect.getmembers(errors, inspect.isclass)
               if cls.__module__ == "dbscheduler.errors"]
    assert len(defined) >= 10
    assert all(issubclass(cls, errors.SchedulerError) for cls in defined), defined


def test_no_bare_runtime_error_in_the_library() -> None:
    raised = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)
                    and isinstance(node.exc.func, ast.Name)
                    and node.exc.func.id in {"RuntimeError", "Exception"}):
                raised.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert not raised, f"raise a named error of dbscheduler.errors instead: {raised}"


@pytest.mark.parametrize(("old_home", "name"), [
    ("dbscheduler.migrate", "TableManagedElsewhere"),
    ("dbscheduler.http_delivery", "TargetRefused"),
    ("dbscheduler.http_delivery", "DeliveryFailed"),
    ("dbscheduler.testing", "TooManyRuns"),
    ("dbscheduler._engine.isolation", "ChildFailed"),
    ("dbscheduler._engine.unreadable", "UnreadableRow"),
    ("dbscheduler.dialects", "ListenUnavailable"),
    ("dbscheduler", "LifecycleError"),
])
def test_old_import_paths_still_work(old_home: str, name: str) -> None:
    assert getattr(importlib.import_module(old_home), name) is getattr(errors, name)


def test_named_errors_keep_their_old_bases() -> None:
    assert issubclass(errors.LifecycleError, RuntimeError)
    assert issubclass(errors.TooManyRuns, RuntimeError)
    assert issubclass(errors.UnreadableRow, ValueError)
    assert issubclass(errors.TaskNotFound, LookupError)


def test_the_errors_examples_run() -> None:
    import doctest

    assert doctest.testmod(errors).failed == 0
