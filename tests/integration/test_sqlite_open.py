"""Many nodes opening one SQLite file at the same instant: none dies of "database is locked"
while switching the file to WAL mode."""

from __future__ import annotations

import multiprocessing
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from pathlib import Path

import sqlalchemy as sa

from dbscheduler.dialects.sqlite import SQLiteDialect

OPENERS = 10
FILES = 60
"""Before the fix about one opening in four of a fresh file failed with these numbers."""


def _open_each(paths: list[str], barrier: Barrier, errors: Queue[list[str]]) -> None:
    failed: list[str] = []
    for path in paths:
        engine = sa.create_engine(f"sqlite:///{path}", poolclass=sa.pool.NullPool)
        SQLiteDialect().configure_engine(engine)
        barrier.wait()  # every process opens the same fresh file at the same moment
        try:
            with engine.connect() as conn:
                conn.exec_driver_sql("SELECT 1")
                mode = conn.exec_driver_sql("PRAGMA journal_mode").scalar()
                if mode != "wal":
                    failed.append(f"{path}: journal_mode {mode}")
        except Exception as exc:
            failed.append(f"{path}: {exc}")
        finally:
            engine.dispose()
    errors.put(failed)


def test_concurrent_openers_of_a_fresh_file_all_get_wal(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    paths = [str(tmp_path / f"{i}.sqlite3") for i in range(FILES)]
    barrier = ctx.Barrier(OPENERS, timeout=60)
    errors: Queue[list[str]] = ctx.Queue()
    procs = [ctx.Process(target=_open_each, args=(paths, barrier, errors))
             for _ in range(OPENERS)]
    for proc in procs:
        proc.start()
    failed = [line for _ in procs for line in errors.get(timeout=120)]
    for proc in procs:
        proc.join(30)
    assert failed == []
