"""What the run history and the lateness check cost: ``python -m bench.history [--url URL]``.

Four measurements on one fresh table (PostgreSQL by default):

* **prune** — ``N`` (1,000,000) run rows older than the retention, deleted by the built-in
  task's code: total time, statements, the longest statement; meanwhile another connection
  updates a task row every 10 ms and the longest of those writes is reported (a long lock or
  transaction would show there);
* **count limit** — the per-task count check (one ``GROUP BY`` over the history) with those
  rows present, before the prune;
* **finish** — pick + finish of batches of 100 executions, with and without history:
  statements per batch and executions per second;
* **idle** — one node with 10,000 tasks (every one with ``alert_after``), history on and the
  lateness check every ``overdue_check`` (default 30 s): statements per second over
  ``--idle-seconds`` (60), and the time of one lateness check.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from dbscheduler import FixedRate, Scheduler
from dbscheduler._store import FinishWrite, RunRecord, Store, prune_beyond, prune_older
from dbscheduler._store.alerts import late_rows
from dbscheduler.companion_tables import make_runs_table
from dbscheduler.migrate import upgrade


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def _seed(engine: sa.Engine, table: str, rows: int) -> None:
    runs = make_runs_table(table)
    if engine.dialect.name == "postgresql":
        with engine.begin() as conn:
            conn.execute(sa.text(
                f"INSERT INTO {runs.name} (task_name, token, attempt, node_id, scheduled_at, "
                "started_at, finished_at, status) SELECT 'task-' || (g % 1000), g, 1, 'seed', "
                "now() - interval '30 days' + g * interval '1 millisecond', "
                "now() - interval '30 days' + g * interval '1 millisecond', "
                "now() - interval '30 days' + g * interval '1 millisecond', 'success' "
                "FROM generate_series(1, :n) AS g"), {"n": rows})
            conn.execute(sa.text(f"ANALYZE {runs.name}"))
        return
    from datetime import datetime, timezone

    base = datetime.now(timezone.utc) - timedelta(days=30)
    for start in range(0, rows, 10_000):
        with engine.begin() as conn:
            conn.execute(sa.insert(runs), [
                {"task_name": f"task-{g % 1000}", "token": g, "attempt": 1, "node_id": "seed",
                 "scheduled_at": base + timedelta(milliseconds=g),
                 "started_at": base + timedelta(milliseconds=g),
                 "finished_at": base + timedelta(milliseconds=g), "status": "success"}
                for g in range(start, min(rows, start + 10_000))])


def _counter(engine: sa.Engine) -> list[int]:
    """``[n]``: the statements sent on ``engine`` from now on."""
    count = [0]

    def seen(*args: Any, **kwargs: Any) -> None:
        count[0] += 1

    sa.event.listen(engine, "before_cursor_execute", seen)
    return count


def _timed_statements(engine: sa.Engine) -> tuple[list[float], Callable[[], None]]:
    """Durations of every statement on ``engine`` from now on; call the second to stop."""
    durations: list[float] = []
    started: dict[int, float] = {}

    def before(conn: Any, cursor: Any, *args: Any) -> None:
        started[id(cursor)] = time.perf_counter()

    def after(conn: Any, cursor: Any, *args: Any) -> None:
        durations.append(time.perf_counter() - started.pop(id(cursor), time.perf_counter()))

    sa.event.listen(engine, "before_cursor_execute", before)
    sa.event.listen(engine, "after_cursor_execute", after)

    def stop() -> None:
        sa.event.remove(engine, "before_cursor_execute", before)
        sa.event.remove(engine, "after_cursor_execute", after)

    return durations, stop


def bench_prune(url: str, table: str, rows: int) -> None:
    engine = sa.create_engine(url, pool_size=4)
    store = Store(engine, table)
    t0 = time.monotonic()
    _seed(engine, table, rows)
    print(f"seeded {rows:,} run rows of 1,000 tasks, 30 days old, in "
          f"{time.monotonic() - t0:.1f} s")

    t0 = time.perf_counter()
    with store.read() as conn:
        crowded = conn.execute(
            sa.select(store.runs_table.c.task_name).group_by(store.runs_table.c.task_name)
            .having(sa.func.count() > 1000)).all()
    print(f"count limit check (GROUP BY over {rows:,} rows): "
          f"{_ms(time.perf_counter() - t0)}, {len(crowded)} task(s) over 1,000")

    # A writer next to the prune: a task row updated every 10 ms, each write timed.
    s = Scheduler(engine=sa.create_engine(url), table=table)
    s.add("neighbour", lambda: None, schedule=FixedRate(3600))
    s.sync()
    writes: list[float] = []
    stop = threading.Event()

    def neighbour() -> None:
        t = store.table
        while not stop.is_set():
            w0 = time.perf_counter()
            with store.autocommit() as conn:
                conn.execute(sa.update(t).where(t.c.queue_name == "neighbour")
                             .values(attempt=t.c.attempt + 1))
            writes.append(time.perf_counter() - w0)
            stop.wait(0.01)

    thread = threading.Thread(target=neighbour)
    durations, untimed = _timed_statements(engine)
    thread.start()
    t0 = time.perf_counter()
    deleted = batches = 0
    for n in prune_older(store, store.db_now() - timedelta(days=7)):
        deleted += n
        batches += 1
    elapsed = time.perf_counter() - t0
    stop.set()
    thread.join()
    untimed()
    durations.sort()
    print(f"prune by age: {deleted:,} rows in {elapsed:.1f} s ({deleted / elapsed:,.0f} rows/s), "
          f"{batches} deletes of <= 1,000 rows, {len(durations)} statements; statement "
          f"median {_ms(statistics.median(durations))}, p99 "
          f"{_ms(durations[int(len(durations) * 0.99)])}, max {_ms(durations[-1])}")
    writes.sort()
    print(f"  a task row written every 10 ms meanwhile: {len(writes)} writes, median "
          f"{_ms(statistics.median(writes))}, max {_ms(writes[-1])}")
    assert sum(prune_beyond(store, 1000)) == 0
    s.engine.dispose()
    engine.dispose()


def bench_finish(url: str, table: str, batches: int) -> None:
    for history in (False, True):
        engine = sa.create_engine(url)
        s = Scheduler(engine=engine, table=table, history=None if not history else 7 * 86400)
        names = [f"f{history}-{i}" for i in range(100)]
        for name in names:
            s.add(name, lambda: None, schedule=FixedRate(3600))
        s.sync()
        store = Store(engine, table, history=history)
        t = store.table
        count = _counter(engine)
        spent = 0.0
        finish_statements = 0
        for _ in range(batches):
            with store.autocommit() as conn:  # all 100 due now
                conn.execute(sa.update(t).where(t.c.queue_name.in_(names))
                             .values(next_process_at=sa.func.now()
                                     if engine.dialect.name == "postgresql"
                                     else store.db_now() - timedelta(seconds=1)))
            t0 = time.perf_counter()
            rows = store.pick("bench", 100, timedelta(seconds=30), names).rows
            before = count[0]
            store.finish("bench", lambda now, rows=rows: [FinishWrite(
                int(r["id"]), int(r["total_attempt"]), "success", now + timedelta(hours=1), 0,
                now, run=RunRecord(r["queue_name"], int(r["total_attempt"]), 1, "bench",
                                   r["last_started_at"], r["last_started_at"]))
                for r in rows])
            finish_statements += count[0] - before
            spent += time.perf_counter() - t0
        label = "with history" if history else "history off "
        print(f"finish {label}: {finish_statements / batches:.0f} statement(s) per batch of "
              f"100 (clock read included), {batches * 100 / spent:,.0f} executions/s "
              "(pick + finish)")
        engine.dispose()


def bench_idle(url: str, table: str, seconds: float, check: float) -> None:
    s = Scheduler(url, table=table, poll_interval=timedelta(seconds=1),
                  overdue_check=timedelta(seconds=check))
    for i in range(10_000):
        s.add(f"idle-{i}", lambda: None, schedule=FixedRate(86400), alert_after=7 * 86400)
    s.sync()
    t0 = time.perf_counter()
    late_rows(s._store, timedelta(seconds=60))
    print(f"one lateness check with 10,000 tasks (all with alert_after): "
          f"{_ms(time.perf_counter() - t0)}")
    s.start()
    time.sleep(3)
    count = _counter(s.engine)
    time.sleep(seconds)
    s.shutdown()
    print(f"idle node, 10,000 tasks, history on, overdue_check {check:g} s: "
          f"{count[0] / seconds:.2f} statements/s over {seconds:g} s")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--url", default="postgresql+psycopg://postgres@127.0.0.1:5432/test")
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--batches", type=int, default=50)
    p.add_argument("--idle-seconds", type=float, default=60.0)
    p.add_argument("--overdue-check", type=float, default=30.0)
    p.add_argument("--only", choices=("prune", "finish", "idle"), action="append")
    args = p.parse_args(argv)
    table = f"bench_{uuid.uuid4().hex[:8]}"
    engine = sa.create_engine(args.url)
    upgrade(engine, table)
    try:
        only = set(args.only or ("prune", "finish", "idle"))
        if "prune" in only:
            bench_prune(args.url, table, args.rows)
        if "finish" in only:
            bench_finish(args.url, table, args.batches)
        if "idle" in only:
            bench_idle(args.url, table, args.idle_seconds, args.overdue_check)
    finally:
        with engine.begin() as conn:
            for name in (f"{table}_runs", table, f"{table}_version"):
                sa.Table(name, sa.MetaData()).drop(conn, checkfirst=True)
        engine.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
