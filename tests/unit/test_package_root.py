"""The package root shows the public API alone: the engine's internals live in ``_engine``.

A new module at the root is a new public name users may import and come to rely on; one that
is internal belongs in ``dbscheduler/_engine`` (or ``_store``, the SQL, or a dialect). Adding
a public one means documenting it (``docs/reference/api``) and adding it here.
"""

from __future__ import annotations

from pathlib import Path

import dbscheduler

PACKAGE = Path(dbscheduler.__file__).parent

PUBLIC = {
    "__init__", "__main__", "batches", "bulk", "cli", "client", "context", "contrib",
    "dialects", "errors", "failures", "health", "http_delivery", "listeners", "logfields",
    "metrics", "migrate", "nodes", "scheduler", "schedules", "table", "testing", "tracing",
    "web",
}
"""The public modules and packages at the root."""

PRIVATE = {"_engine", "_migrations", "_store"}
"""The private packages at the root: the engine, the migrations' scripts, the SQL."""


def root_entries() -> set[str]:
    return {
        path.stem
        for path in PACKAGE.iterdir()
        if (path.suffix == ".py" or (path.is_dir() and path.name != "__pycache__"))
    }


def test_the_root_holds_only_the_public_modules_and_the_private_packages() -> None:
    entries = root_entries()
    assert entries - PUBLIC - PRIVATE == set(), "new modules at the package root"
    assert entries >= PUBLIC | PRIVATE, "modules of the list are gone"


def test_the_private_packages_are_packages() -> None:
    for name in PRIVATE:
        assert (PACKAGE / name).is_dir(), name
