"""Fixtures shared by every test: real databases, one fresh table per test; the examples."""

from __future__ import annotations

import importlib.util
import os
import sys
import uuid
from collections.abc import Callable, Iterator
from itertools import zip_longest
from pathlib import Path
from types import ModuleType

import pytest
import sqlalchemy as sa

from dbscheduler import Scheduler
from tests.databases import begin_run, drop_table, end_run, find, required, unique_table
from tests.servers_lock import servers_lock

if os.environ.get("PYTEST_XDIST_WORKER"):
    # pytest-xdist's workers set COLUMNS=80 / LINES=24; the command line's subprocesses would
    # take them for a terminal's size (piped output keeps its natural width without them).
    os.environ.pop("COLUMNS", None)
    os.environ.pop("LINES", None)

SERVER_BACKENDS = ("postgresql", "mysql")
EXTRA_BACKENDS = ("mssql", "oracle")
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--chaos-long", action="store_true",
                     help="run the long fault-injection suite (>= 10 minutes)")


def pytest_configure(config: pytest.Config) -> None:
    # The controller (or the only process, without xdist) owns the run's private servers:
    # its workers inherit where they live, and it removes them once every worker is done.
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        begin_run()
        if sys.flags.dont_write_bytecode:
            _compile_bytecode()


def _compile_bytecode() -> None:
    """Write the bytecode of the project's own modules once, when the environment forbids
    Python to (``PYTHONDONTWRITEBYTECODE``): the suite starts some 850 node processes, and
    each would otherwise compile the same ninety modules from source again (0.2 s of CPU
    apiece, a tenth of the suite's). Only where Python would write it itself: the
    ``__pycache__`` directories beside the sources, which git ignores."""
    import compileall

    root = Path(__file__).resolve().parents[1]
    for package in ("dbscheduler", "tests"):
        compileall.compile_dir(root / package, quiet=2, workers=0)


def pytest_unconfigure(config: pytest.Config) -> None:
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        end_run()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files in the order the workers should take them (each file keeps its own order): the
    fault and topology scenarios (the longest, each busy with several processes) alternating
    with the other multi-process files, then the rest, the unit tests last. The long ones
    start early, so none is left running alone at the end, but not all at once: together they
    starved each other's nodes of CPU on a machine of two cores."""
    rank: dict[str, int] = {}
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        if item.get_closest_marker("topologies") or item.get_closest_marker("chaos"):
            mine = 0
        elif item.get_closest_marker("slow"):
            mine = 1
        else:
            mine = 3 if path.startswith("tests/unit/") else 2
        rank[path] = min(rank.get(path, mine), mine)
    files = list(dict.fromkeys(item.nodeid.split("::", 1)[0] for item in items))
    heavy = [f for f in files if rank[f] == 0]
    slow = [f for f in files if rank[f] == 1]
    alternating = [f for pair in zip_longest(heavy, slow) for f in pair if f is not None]
    order = {f: i for i, f in enumerate(
        alternating + [f for f in files if rank[f] == 2] + [f for f in files if rank[f] == 3])}
    items.sort(key=lambda item: order[item.nodeid.split("::", 1)[0]])


@pytest.fixture(autouse=True)
def _servers_lock(request: pytest.FixtureRequest,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Under pytest-xdist, a test that restarts the run's private database servers runs while
    no other worker runs a test (see tests/servers_lock.py)."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        yield
        return
    exclusive = request.node.get_closest_marker("restarts_servers") is not None
    with servers_lock(tmp_path_factory.getbasetemp().parent, exclusive):
        yield


def backend_url(backend: str, tmp_path: Path) -> str:
    """A URL for ``backend``; skips (or fails, when required) if no server is reachable."""
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'dbscheduler.sqlite3'}"
    found = find(backend)
    if found.url is None:
        if backend in required():
            pytest.fail(f"DBSCHEDULER_REQUIRE_DATABASES names {backend}, but {found.reason}")
        pytest.skip(found.reason)
    return found.url


@pytest.fixture(params=["sqlite", *SERVER_BACKENDS, *EXTRA_BACKENDS])
def backend(request: pytest.FixtureRequest) -> str:
    """Each test using it runs on SQLite, PostgreSQL, MariaDB/MySQL, SQL Server and Oracle;
    the last two skip with the reason where no server is reachable (see tests/databases.py)."""
    return str(request.param)


@pytest.fixture(params=["sqlite", *SERVER_BACKENDS, *EXTRA_BACKENDS])
def any_backend(request: pytest.FixtureRequest) -> str:
    """Also SQL Server and Oracle: they skip with the reason where no server is reachable."""
    return str(request.param)


@pytest.fixture
def db_url(backend: str, tmp_path: Path) -> str:
    return backend_url(backend, tmp_path)


@pytest.fixture
def table_name(db_url: str) -> Iterator[str]:
    """A table name no other test uses; the table is dropped afterwards."""
    name = unique_table()
    yield name
    drop_table(db_url, name)


@pytest.fixture
def migrated(db_url: str, table_name: str) -> tuple[str, str]:
    """``(url, table)`` with the table created by the migrations."""
    from dbscheduler.migrate import upgrade

    engine = sa.create_engine(db_url)
    upgrade(engine, table_name)
    engine.dispose()
    return db_url, table_name


@pytest.fixture(autouse=True)
def _no_stray_default_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Scheduler() with no URL writes ./dbscheduler.sqlite3: keep tests out of the checkout.
    monkeypatch.chdir(tmp_path)
    os.environ.pop("DBSCHEDULER_URL", None)


@pytest.fixture
def load_example(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], ModuleType]]:
    """Import ``examples/<name>.py`` afresh (its module-level Scheduler is new each time)."""
    loaded: list[ModuleType] = []

    def load(name: str) -> ModuleType:
        spec = importlib.util.spec_from_file_location(
            f"example_{name}_{uuid.uuid4().hex[:6]}", EXAMPLES / f"{name}.py"
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        loaded.append(module)
        return module

    yield load
    for module in loaded:
        scheduler = getattr(module, "scheduler", None)
        if isinstance(scheduler, Scheduler):
            scheduler.shutdown(timeout=5)
            scheduler.engine.dispose()
