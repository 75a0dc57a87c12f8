"""What the run history and the lateness check cost: ``python -m bench.probes.history``.

``--private pg`` (the default without ``--url``) or ``--private mariadb`` runs it on a
throwaway server of the test suite's (tests/servers/). Six measurements, each on a fresh
table:

* **prune** — ``N`` (1,000,000) run rows older than the retention, deleted by the built-in
  task's code: total time, statements, the longest statement; meanwhile another connection
  updates a task row every 10 ms and the longest of those writes is reported (a long lock or
  transaction would show there);
* **count limit** — the per-task count check (one ``GROUP BY`` over the history) with those
  rows present, before the prune;
* **finish** — pick + finish of batches of 100 executions, without history, with history
  but without the status index, and with both (taken in turns): statements per batch,
  executions per second and the time of one finish;
* **filters** — ``N`` run rows, one in 10,000 ``cancelled``: the runs page's filters as
  ``Client.runs()`` sends them (a rare status, a status and a time range, a task, the
  unfiltered newest page), each timed (median of 5) with the database's plan, without the
  status index of revision 10 and with it;
* **node** — a node running ``--node-tasks`` tasks back to back (``FixedDelay(0)``) beside
  ``N`` run rows older than the retention: its executions per second and start lag (start
  minus due time) while the built-in ``dbscheduler.prune-runs`` deletes them, against the
  same node in the same length of time before and after it (``--without-status-index``:
  the same without the index of revision 10, whose entries a delete removes too);
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
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from dbscheduler import FixedRate, Scheduler
from dbscheduler._store import FinishWrite, RunRecord, Store, prune_beyond, prune_older
from dbscheduler._store.alerts import late_rows
from dbscheduler.migrate import upgrade
from dbscheduler.table import make_runs_table


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def seed_runs(engine: sa.Engine, table: str, rows: int, *, days_ago: float = 30,
              tasks: int = 1000, prefix: str = "task-", width: int = 0,
              rare: int = 0) -> None:
    """``rows`` run rows of ``tasks`` tasks (``prefix`` + number, zero-padded to ``width``
    digits when given), one a millisecond from
    ``days_ago`` days back; with ``rare`` every ``rare``-th is ``cancelled``, the rest
    ``success``. One statement on PostgreSQL and MariaDB (its sequence engine), batches of
    10,000 elsewhere."""
    runs = make_runs_table(table)
    name = engine.dialect.name
    if name == "postgresql":
        number = f"lpad((g % :tasks)::text, {width}, '0')" if width else "(g % :tasks)"
        source, g, task = "generate_series(1, :n) AS s(g)", "g", f":prefix || {number}"
        at = "now() - :days * interval '1 day' + g * interval '1 millisecond'"
    elif name == "mysql" and getattr(engine.dialect, "is_mariadb", False):
        number = f"LPAD(seq % :tasks, {width}, '0')" if width else "seq % :tasks"
        source, g, task = f"seq_1_to_{int(rows)}", "seq", f"CONCAT(:prefix, {number})"
        at = ("UTC_TIMESTAMP(6) - INTERVAL CAST(:days * 86400000000 AS SIGNED) MICROSECOND "
              "+ INTERVAL seq * 1000 MICROSECOND")
    else:
        source = ""
    if source:
        status = (f"CASE WHEN {g} % :rare = 0 THEN 'cancelled' ELSE 'success' END"
                  if rare else "'success'")
        with engine.begin() as conn:
            conn.execute(sa.text(
                f"INSERT INTO {runs.name} (task_name, token, attempt, node_id, scheduled_at, "
                f"started_at, finished_at, status) SELECT {task}, {g}, 1, 'seed', "
                f"{at}, {at}, {at}, {status} FROM {source}"),
                {"n": rows, "days": days_ago, "tasks": tasks, "prefix": prefix,
                 **({"rare": rare} if rare else {})})
            conn.execute(sa.text(f"ANALYZE {'' if name == 'postgresql' else 'TABLE '}"
                                 f"{runs.name}"))
        return
    from datetime import datetime, timezone

    base = datetime.now(timezone.utc) - timedelta(days=days_ago)
    for start in range(0, rows, 10_000):
        with engine.begin() as conn:
            conn.execute(sa.insert(runs), [
                {"task_name": f"{prefix}{g % tasks:0{width}d}", "token": g, "attempt": 1,
                 "node_id": "seed", "scheduled_at": base + timedelta(milliseconds=g),
                 "started_at": base + timedelta(milliseconds=g),
                 "finished_at": base + timedelta(milliseconds=g),
                 "status": "cancelled" if rare and g % rare == 0 else "success"}
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
    seed_runs(engine, table, rows)
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


FINISH_CONFIGS = ("history off", "history, no status index", "history")


def _status_index(engine: sa.Engine, table: str, present: bool) -> None:
    """Create or drop the run history's status index (revision 10), to measure its cost."""
    runs = make_runs_table(table)
    (index,) = (i for i in runs.indexes if str(i.name).endswith("_status_idx"))
    with engine.begin() as conn:
        if present:
            index.create(conn, checkfirst=True)
        else:
            index.drop(conn, checkfirst=True)


def bench_finish(url: str, table: str, batches: int, rounds: int = 5) -> None:
    """Pick + finish of batches of 100 executions in three set-ups, taken in turns
    (``rounds`` times ``batches / rounds`` batches each), so that a neighbour's load on the
    machine weighs on all three alike."""
    engine = sa.create_engine(url)
    store = Store(engine, table)
    t = store.table
    names = {c: [f"f{n}-{i}" for i in range(100)] for n, c in enumerate(FINISH_CONFIGS)}
    s = Scheduler(engine=engine, table=table)
    for config in FINISH_CONFIGS:
        for name in names[config]:
            s.add(name, lambda: None, schedule=FixedRate(3600))
    s.sync()
    count = _counter(engine)
    spent = dict.fromkeys(FINISH_CONFIGS, 0.0)
    finishing = dict.fromkeys(FINISH_CONFIGS, 0.0)
    statements = dict.fromkeys(FINISH_CONFIGS, 0)
    done = dict.fromkeys(FINISH_CONFIGS, 0)
    per_round = max(1, batches // rounds)
    stores = {c: Store(engine, table, history=c != "history off") for c in FINISH_CONFIGS}
    for _ in range(rounds):
        for config in FINISH_CONFIGS:
            _status_index(engine, table, config != "history, no status index")
            batch_store = stores[config]
            mine = names[config]
            for _ in range(per_round):
                with batch_store.autocommit() as conn:  # all 100 due now
                    conn.execute(sa.update(t).where(t.c.queue_name.in_(mine))
                                 .values(next_process_at=batch_store.db_now()
                                         - timedelta(seconds=1)))
                t0 = time.perf_counter()
                rows = batch_store.pick("bench", 100, timedelta(seconds=30), mine).rows
                before = count[0]
                t1 = time.perf_counter()
                batch_store.finish("bench", lambda now, rows=rows: [FinishWrite(
                    int(r["id"]), int(r["total_attempt"]), "success",
                    now + timedelta(hours=1), 0, now,
                    run=RunRecord(r["queue_name"], int(r["total_attempt"]), 1, "bench",
                                  r["last_started_at"], r["last_started_at"]))
                    for r in rows])
                t2 = time.perf_counter()
                statements[config] += count[0] - before
                spent[config] += t2 - t0
                finishing[config] += t2 - t1
                done[config] += 1
    _status_index(engine, table, True)
    for config in FINISH_CONFIGS:
        n = done[config]
        print(f"finish, {config:<24}: {statements[config] / n:.0f} statement(s) per batch of "
              f"100 (clock read included), {n * 100 / spent[config]:,.0f} executions/s "
              f"(pick + finish), finish of 100 {_ms(finishing[config] / n)}")
    engine.dispose()


RARE_EVERY = 10_000
"""One seeded run row in this many is ``cancelled`` (the rare status a filter looks for)."""


def _seed_statuses(engine: sa.Engine, table: str, rows: int) -> None:
    """``rows`` recent runs of 1,000 tasks: every 100th an error, every 10,000th cancelled."""
    runs = make_runs_table(table)
    if engine.dialect.name == "postgresql":
        with engine.begin() as conn:
            conn.execute(sa.text(
                f"INSERT INTO {runs.name} (task_name, token, attempt, node_id, scheduled_at, "
                "started_at, finished_at, status) SELECT 'task-' || (g % 1000), g, 1, "
                "'node-' || (g % 3), now() - interval '1 day' + g * interval '1 millisecond', "
                "now() - interval '1 day' + g * interval '1 millisecond', "
                "now() - interval '1 day' + g * interval '1 millisecond', "
                f"CASE WHEN g % {RARE_EVERY} = 0 THEN 'cancelled' WHEN g % 100 = 0 THEN 'error' "
                "ELSE 'success' END FROM generate_series(1, :n) AS g"), {"n": rows})
            conn.execute(sa.text(f"ANALYZE {runs.name}"))
        return
    from datetime import datetime, timezone

    base = datetime.now(timezone.utc) - timedelta(days=1)
    for start in range(0, rows, 10_000):
        with engine.begin() as conn:
            conn.execute(sa.insert(runs), [
                {"task_name": f"task-{g % 1000}", "token": g, "attempt": 1,
                 "node_id": f"node-{g % 3}", "scheduled_at": base + timedelta(milliseconds=g),
                 "started_at": base + timedelta(milliseconds=g),
                 "finished_at": base + timedelta(milliseconds=g),
                 "status": ("cancelled" if g % RARE_EVERY == 0
                            else "error" if g % 100 == 0 else "success")}
                for g in range(start, min(rows, start + 10_000))])
    with engine.begin() as conn:
        conn.execute(sa.text(f"ANALYZE TABLE {runs.name}"))


def _plan(engine: sa.Engine, statement: str, params: Any) -> str:
    """The database's plan of ``statement`` (PostgreSQL: executed, with buffers), one line
    per step."""
    with engine.connect() as conn:
        if engine.dialect.name == "postgresql":
            rows = conn.exec_driver_sql(f"EXPLAIN (ANALYZE, BUFFERS) {statement}", params)
            return "\n".join(f"    {r[0]}" for r in rows)
        result = conn.exec_driver_sql(f"EXPLAIN {statement}", params)
        keys = list(result.keys())
        return "\n".join("    " + " ".join(f"{k}={v}" for k, v in zip(keys, r, strict=True)
                                               if k in ("table", "type", "key", "rows", "Extra"))
                         for r in result)


def bench_filters(url: str, table: str, rows: int) -> None:
    from datetime import datetime, timezone

    from dbscheduler import Client

    engine = sa.create_engine(url)
    t0 = time.monotonic()
    _seed_statuses(engine, table, rows)
    print(f"seeded {rows:,} recent run rows (1 in 100 error, 1 in {RARE_EVERY:,} cancelled) in "
          f"{time.monotonic() - t0:.1f} s")
    client = Client(engine=engine, table=table)
    # The newer half of the seeded rows (they finished 1 ms apart, from a day ago).
    day = datetime.now(timezone.utc) - timedelta(days=1) + timedelta(milliseconds=rows // 2)
    cases: list[tuple[str, dict[str, Any]]] = [
        ("status=cancelled", {"status": "cancelled"}),
        ("status=cancelled,lost", {"status": ["cancelled", "lost"]}),
        ("status=error", {"status": "error"}),
        ("status=success,error", {"status": ["success", "error"]}),
        ("status=cancelled, newer half", {"status": "cancelled", "since": day}),
        ("task=task-7", {"name": "task-7"}),
        ("newest page", {}),
    ]
    with engine.connect() as conn:  # a page half way down the history, by its cursor
        runs = make_runs_table(table)
        middle = conn.execute(sa.select(runs.c.finished_at, runs.c.id)
                              .order_by(runs.c.finished_at.desc(), runs.c.id.desc())
                              .offset(rows // 2).limit(1)).one()
    from dbscheduler.context import RunInfo
    from dbscheduler.dialects.types import to_utc

    at = to_utc(middle.finished_at)
    assert at is not None
    deep = RunInfo(id=middle.id, name="", token=0, attempt=0, node_id="", scheduled_at=at,
                   started_at=at, finished_at=at, status="success", error=None).cursor
    cases += [("page half way down, by cursor", {"cursor": deep}),
              ("status=error, half way down", {"status": "error", "cursor": deep})]
    for present in (False, True):
        t0 = time.perf_counter()
        _status_index(engine, table, present)
        if present:  # what the upgrade to revision 10 costs on such a history
            print(f"status index built on {rows:,} rows in {time.perf_counter() - t0:.1f} s")
        analyze = "ANALYZE" if engine.dialect.name == "postgresql" else "ANALYZE TABLE"
        with engine.begin() as conn:
            conn.exec_driver_sql(f"{analyze} {table}_runs")
        print(f"-- {'with' if present else 'without'} the status index (revision 10)")
        _filter_cases(engine, client, cases)
    client.close()
    engine.dispose()


def _filter_cases(engine: sa.Engine, client: Any, cases: list[tuple[str, dict[str, Any]]]) -> None:
    for label, kwargs in cases:
        seen: list[tuple[str, Any]] = []

        def capture(conn: Any, cursor: Any, statement: str, params: Any, *args: Any,
                    seen: list[tuple[str, Any]] = seen) -> None:
            seen.append((statement, params))

        sa.event.listen(engine, "before_cursor_execute", capture)
        found = client.runs(limit=100, **kwargs)
        sa.event.remove(engine, "before_cursor_execute", capture)
        times = []
        for _ in range(5):
            t1 = time.perf_counter()
            client.runs(limit=100, **kwargs)
            times.append(time.perf_counter() - t1)
        statement, params = next((s, p) for s, p in seen if "_runs" in s)
        print(f"runs({label}): {len(found)} rows, median {_ms(statistics.median(times))}")
        print(_plan(engine, statement, params))


def bench_node(url: str, table: str, rows: int, tasks: int, window: float) -> None:
    """A node's throughput and start lag while the built-in prune deletes ``rows`` old runs,
    against the same node before it."""
    from dbscheduler import Client, FixedDelay, TaskContext
    from dbscheduler._engine.history import PRUNE_TASK

    engine = sa.create_engine(url, pool_size=4)
    t0 = time.monotonic()
    seed_runs(engine, table, rows)
    print(f"seeded {rows:,} run rows 30 days old in {time.monotonic() - t0:.1f} s")
    engine.dispose()
    starts: list[tuple[float, float]] = []  # (monotonic time of the start, lag in seconds)
    lock = threading.Lock()

    class Lag:
        def on_started(self, ctx: TaskContext) -> None:
            if ctx.name.startswith("work-"):
                lag = (ctx.started_at - ctx.scheduled_at).total_seconds()
                with lock:
                    starts.append((time.monotonic(), lag))

    s = Scheduler(url, table=table, node_id="bench-node", history=7 * 86400,
                  poll_interval=timedelta(seconds=1))
    for i in range(tasks):
        s.add(f"work-{i}", lambda ctx: time.sleep(0.002), schedule=FixedDelay(0))
    s.add_listener(Lag())
    s.start()
    client = Client(url, table=table)
    try:
        time.sleep(5)  # warm: every task running back to back
        b0 = time.monotonic()
        time.sleep(window)
        b1 = time.monotonic()
        client.trigger(PRUNE_TASK)
        p0 = time.monotonic()
        while not [r for r in client.runs(PRUNE_TASK, limit=1)]:
            time.sleep(0.5)
        run = client.runs(PRUNE_TASK, limit=1)[0]
        p1 = time.monotonic()
        a0 = time.monotonic()
        time.sleep(window)
        a1 = time.monotonic()
    finally:
        s.shutdown(timeout=10)
        client.close()

    def report(label: str, lo: float, hi: float) -> None:
        lags = sorted(lag for at, lag in starts if lo <= at < hi)
        if not lags:
            print(f"  {label}: no starts")
            return
        print(f"  {label}: {len(lags) / (hi - lo):,.0f} executions/s, start lag p50 "
              f"{_ms(lags[len(lags) // 2])}, p99 {_ms(lags[int(len(lags) * 0.99)])}, max "
              f"{_ms(lags[-1])} ({hi - lo:.1f} s)")

    print(f"node with {tasks} tasks back to back, prune of {rows:,} runs: the prune ran "
          f"{(run.finished_at - run.started_at).total_seconds():.1f} s ({run.status}), "
          f"{p1 - p0:.1f} s from trigger to its run row")
    report("before the prune", b0, b1)
    report("during the prune", p0, p1)
    report("after the prune ", a0, a1)


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
    p.add_argument("--url", help="the database to measure on (default: --private pg)")
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--batches", type=int, default=50)
    p.add_argument("--idle-seconds", type=float, default=60.0)
    p.add_argument("--overdue-check", type=float, default=30.0)
    p.add_argument("--private", choices=("pg", "mariadb"),
                   help="run on a throwaway server of the test suite's instead of --url")
    p.add_argument("--node-tasks", type=int, default=32)
    p.add_argument("--window", type=float, default=15.0,
                   help="seconds the node is measured before and after the prune")
    p.add_argument("--only", choices=("prune", "finish", "filters", "node", "idle"),
                   action="append")
    p.add_argument("--without-status-index", action="store_true",
                   help="drop the status index of revision 10 for the prune and node parts")
    args = p.parse_args(argv)
    server: Any = None
    url = args.url
    if url is None and args.private is None:
        args.private = "pg"  # never a server someone else uses, unless asked
    if args.private is not None:
        from tests.servers import PrivateMariaDB, PrivatePostgres, throwaway

        server = throwaway(PrivatePostgres if args.private == "pg" else PrivateMariaDB,
                           {"timezone": "UTC"} if args.private == "pg" else None)
        url = server.url
        print(f"private {server.label} on 127.0.0.1:{server.port}")
    try:
        only = args.only or ["prune", "finish", "filters", "node", "idle"]
        for part in only:
            # Each part on its own table: one's rows never weigh on another's figures.
            table = f"bench_{uuid.uuid4().hex[:8]}"
            engine = sa.create_engine(url)
            upgrade(engine, table)
            try:
                if args.without_status_index and part in ("prune", "node"):
                    _status_index(engine, table, False)
                if part == "prune":
                    bench_prune(url, table, args.rows)
                elif part == "finish":
                    bench_finish(url, table, args.batches)
                elif part == "filters":
                    bench_filters(url, table, args.rows)
                elif part == "node":
                    bench_node(url, table, args.rows, args.node_tasks, args.window)
                else:
                    bench_idle(url, table, args.idle_seconds, args.overdue_check)
            finally:
                with engine.begin() as conn:
                    for name in (f"{table}_runs", f"{table}_items", f"{table}_nodes",
                                 f"{table}_groups", table, f"{table}_version"):
                        sa.Table(name, sa.MetaData()).drop(conn, checkfirst=True)
                engine.dispose()
    finally:
        if server is not None:
            crashed = server.directory / "error.log"
            if crashed.exists() and "got signal" in crashed.read_text(errors="replace"):
                kept = Path(f"bench-history-{server.kind}-error.log").resolve()
                kept.write_text(crashed.read_text(errors="replace"))
                print(f"the server crashed: its log is kept in {kept}")
            server.remove()
    return 0


if __name__ == "__main__":
    sys.exit(main())
