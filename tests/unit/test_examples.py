"""The examples in ``examples/`` import without side effects and read their configuration.

Running them (on SQLite in a temporary directory, the cluster script also on PostgreSQL) is
``tests/integration/test_examples.py``; both use the ``load_example`` fixture of
``tests/conftest.py``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from dbscheduler import Scheduler

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


# -- quickstart --------------------------------------------------------------------------


def test_quickstart_imports_without_side_effects(
    tmp_path: Path, load_example: Callable[[str], ModuleType]
) -> None:
    module = load_example("quickstart")
    assert isinstance(module.scheduler, Scheduler)
    assert str(module.scheduler.engine.url) == "sqlite:///dbscheduler.sqlite3"
    assert not (tmp_path / "dbscheduler.sqlite3").exists()  # nothing runs at import


# -- the cluster -------------------------------------------------------------------------


def test_cluster_app_reads_the_cli_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, load_example: Callable[[str], ModuleType]
) -> None:
    monkeypatch.setenv("DBSCHEDULER_URL", f"sqlite:///{tmp_path / 'c.sqlite3'}")
    monkeypatch.setenv("DBSCHEDULER_TABLE", "jobs")
    monkeypatch.setenv("NODE_ID", "node-7")
    scheduler = load_example("cluster_app").scheduler
    assert (scheduler.table, scheduler.node_id) == ("jobs", "node-7")
    assert scheduler.engine.url.database == str(tmp_path / "c.sqlite3")
