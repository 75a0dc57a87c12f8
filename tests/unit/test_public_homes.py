"""Every type a public method takes or returns has a public home: a module whose dotted path has
no ``_``-prefixed part, so a user can import it, annotate with it and find it in the reference."""

from __future__ import annotations

import inspect
import typing
from typing import Any

import dbscheduler
from dbscheduler import testing


def _library_types(hint: Any) -> list[type]:
    if typing.get_origin(hint) is not None:
        return [t for arg in typing.get_args(hint) for t in _library_types(arg)]
    if isinstance(hint, type) and hint.__module__.startswith("dbscheduler"):
        return [hint]
    return []


def _public_callables() -> list[tuple[str, Any]]:
    found: list[tuple[str, Any]] = []
    roots = [getattr(dbscheduler, name) for name in dbscheduler.__all__]
    for obj in [*roots, testing.TestScheduler, testing.Run]:
        if not inspect.isclass(obj):
            if callable(obj):
                found.append((getattr(obj, "__qualname__", repr(obj)), obj))
            continue
        for name, member in inspect.getmembers(obj):
            if name.startswith("_") and name != "__init__":
                continue
            function = member.fget if isinstance(member, property) else member
            if callable(function):
                found.append((f"{obj.__qualname__}.{name}", function))
    return found


def test_public_signatures_name_only_public_types() -> None:
    private: list[str] = []
    checked = 0
    for where, function in _public_callables():
        try:
            hints = typing.get_type_hints(function)
        except (NameError, TypeError):
            continue  # names only imported for type checking (sqlalchemy's Engine): not ours
        checked += 1
        for parameter, hint in hints.items():
            for cls in _library_types(hint):
                if any(part.startswith("_") for part in cls.__module__.split(".")):
                    private.append(f"{where} ({parameter}): {cls.__module__}.{cls.__qualname__}")
    assert checked > 100
    assert not private, "give these types a public home:\n" + "\n".join(private)


def test_group_info_lives_beside_task_info() -> None:
    assert dbscheduler.GroupInfo.__module__ == dbscheduler.TaskInfo.__module__
