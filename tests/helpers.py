"""Small helpers shared by the test suites."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import sqlalchemy as sa

from dbscheduler import Client, Scheduler, TaskInfo
from dbscheduler._store import Store


def wait_until(condition: Callable[[], object], timeout: float = 30, what: str = "") -> None:
    """Poll ``condition`` until it is true; fail the test after ``timeout`` seconds."""
    # The default waits long enough for a machine ten times slower: it costs nothing when the
    # event comes, and only a failing test waits it out.
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            # Imported here: node processes import this module, and pytest costs them 0.15 s
            # of CPU at each start.
            import pytest

            pytest.fail(f"timed out after {timeout} s waiting for {what or condition}")
        time.sleep(0.02)


def _last_poll(scheduler: Scheduler) -> float | None:
    # The library exposes no "polled" event; health() reads the same attribute, but each
    # health() call also queries the database, too much for a 20 ms loop.
    poller = scheduler._poller
    return None if poller is None else poller.last_poll_at


def settled(scheduler: Scheduler, timeout: float = 30) -> None:
    """Wait until the started ``scheduler`` has polled once and, on PostgreSQL, its ``LISTEN``
    is in place: from then on only a wake-up or its next poll starts what is due::

        node.start()
        settled(node)
        node.trigger("report")  # now only the trigger's wake-up can start it early
    """
    listens = scheduler.engine.dialect.name == "postgresql"
    wait_until(lambda: is_settled(scheduler), timeout,
               "the node's first poll" + (" and its LISTEN" if listens else ""))


def is_settled(scheduler: Scheduler) -> bool:
    """What :func:`settled` waits for (also for node processes, which log it as an event)."""
    listener = scheduler._listener
    return _last_poll(scheduler) is not None and (
        scheduler.engine.dialect.name != "postgresql"
        or (listener is not None and listener.ready))


def polled(scheduler: Scheduler, times: int = 3, timeout: float = 30) -> None:
    """Wait until the started ``scheduler`` has polled ``times`` more times: whatever it
    would pick by then, it has picked. The event to wait for when the assertion is that
    nothing happens (a paused task, a group held at 0)::

        scheduler.pause("report"); scheduler.trigger("report")
        polled(scheduler)
        assert ran == []
    """
    seen = [_last_poll(scheduler)]

    def more() -> bool:
        at = _last_poll(scheduler)
        if at != seen[-1]:
            seen.append(at)
        return len(seen) > times

    wait_until(more, timeout, f"{times} polls of the node")


def user_rows(source: Client | Scheduler) -> list[TaskInfo]:
    """The rows of ``source``'s table but the built-in tasks' (``dbscheduler.prune-runs``)."""
    return [t for t in source.tasks() if not t.builtin]


def no_keys(source: Client | Scheduler) -> bool:
    """No row but the built-in tasks' (a delivered key's row is gone)."""
    return not user_rows(source)


@contextmanager
def running(scheduler: Scheduler, shutdown_timeout: float = 5) -> Iterator[Scheduler]:
    """The scheduler started for the block, shut down after it."""
    scheduler.start()
    try:
        yield scheduler
    finally:
        scheduler.shutdown(timeout=shutdown_timeout)


def take_over(store: Store, row_id: int, node: str = "B", previous: str = "A") -> None:
    """Make ``node`` take row ``row_id`` over from ``previous`` as its pick would (the token
    moves on, the previous holder is remembered): ``previous``'s fenced writes must miss it."""
    t = store.table
    with store.engine.begin() as conn:
        conn.execute(sa.update(t).where(t.c.id == row_id)
                     .values(locked_by=node, prev_locked_by=previous,
                             total_attempt=t.c.total_attempt + 1))


def sqlite_write_lock_free(path: str) -> bool:
    """Could another process write the SQLite file ``path`` right now?"""
    conn = sqlite3.connect(path, timeout=0.05, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        conn.close()


def rows_read(conn: sa.Connection, table: str) -> int:
    """Rows this PostgreSQL transaction has read from ``table`` so far, by scans and index
    lookups (``pg_stat_xact_user_tables``)."""
    return int(conn.exec_driver_sql(
        "SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) "
        "FROM pg_stat_xact_user_tables WHERE relname = %(name)s", {"name": table}).scalar_one())
