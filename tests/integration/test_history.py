"""The run history on every real database, in one process: what a run row holds, the
filters of ``runs()``, ``history=None``, reserved names, how the row is written with the
finish (and settled when something goes wrong between the two), and retention."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import sqlalchemy as sa

from dbscheduler import Client, FixedRate, LinearBackoff, Result, Scheduler, TaskContext
from dbscheduler._engine.history import PRUNE_TASK
from dbscheduler._store import FinishWrite, RunRecord, Store
from dbscheduler._store.history import log_first
from dbscheduler.table import make_runs_table
from tests.helpers import running, wait_until


def rows_of(url: str, table: str) -> list[dict[str, Any]]:
    runs = make_runs_table(table)
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return [dict(r) for r in conn.execute(sa.select(runs).order_by(runs.c.id)).mappings()]
    finally:
        engine.dispose()


def test_each_finish_writes_one_run_row_with_its_facts(migrated: tuple[str, str]) -> None:
    url, table = migrated
    s = Scheduler(url, table=table, node_id="node-h", poll_interval=0.1, lease=3)
    seen: dict[str, list[tuple[int, int]]] = {"ok": [], "bad": [], "soft": []}
    stop_me = threading.Event()

    def ok(ctx: TaskContext) -> None:
        seen["ok"].append((ctx.total_attempt, ctx.attempt))
        time.sleep(0.05)

    def bad(ctx: TaskContext) -> None:
        seen["bad"].append((ctx.total_attempt, ctx.attempt))
        raise ValueError(f"bad input #{ctx.total_attempt}")

    def soft(ctx: TaskContext) -> Result:
        seen["soft"].append((ctx.total_attempt, ctx.attempt))
        return Result.error("quota exceeded")

    def stoppable(ctx: TaskContext) -> None:
        stop_me.set()
        ctx.stop_requested.wait(10)

    s.add("ok", ok, schedule=FixedRate(0.3))
    s.add("bad", bad, schedule=FixedRate(3600), on_failure=LinearBackoff(0.2, max_attempts=3))
    s.add("soft", soft, schedule=FixedRate(3600))
    s.add("stoppable", stoppable, schedule=FixedRate(3600))
    with running(s):
        for name in ("bad", "soft", "stoppable"):
            s.trigger(name)
        assert stop_me.wait(10)
        s.cancel("stoppable")
        wait_until(lambda: len(s.runs("ok")) >= 3 and len(s.runs("bad")) == 3
                   and s.runs("stoppable"), 15, "runs of every task")
    runs = s.runs(limit=1000)
    assert [r.finished_at for r in runs] == sorted((r.finished_at for r in runs), reverse=True)
    assert {r.node_id for r in runs} == {"node-h"}
    bad_runs = s.runs("bad")
    # Newest first: three attempts of one occurrence, each with its own token.
    assert [(r.token, r.attempt) for r in bad_runs] == sorted(seen["bad"], reverse=True)
    assert [r.attempt for r in bad_runs] == [3, 2, 1]
    assert [r.error for r in bad_runs] == [f"ValueError: bad input #{r.token}" for r in bad_runs]
    assert {r.status for r in bad_runs} == {"error"}
    (soft_run,) = s.runs("soft")
    assert (soft_run.status, soft_run.error) == ("error", "quota exceeded")
    (cancelled,) = s.runs("stoppable")
    assert cancelled.status == "cancelled"
    for run in s.runs("ok"):
        assert (run.status, run.error) == ("success", None)
        assert (run.token, run.attempt) in seen["ok"]
        assert run.scheduled_at <= run.started_at <= run.finished_at
        assert run.duration >= timedelta(seconds=0.04)
    info = s.info("ok")
    assert info.last_success_at is not None and info.last_success_at >= s.runs("ok")[0].started_at
    assert s.info("bad").last_success_at is None

    # The filters: status (one or several), time window, limit; a name without runs.
    assert {r.name for r in s.runs(status="error")} == {"bad", "soft"}
    assert {r.status for r in s.runs(status=["cancelled", "success"])} == {"cancelled", "success"}
    middle = runs[len(runs) // 2].finished_at
    assert all(r.finished_at >= middle for r in s.runs(since=middle))
    assert all(r.finished_at < middle for r in s.runs(until=middle))
    assert len(s.runs(since=middle)) + len(s.runs(until=middle)) == len(runs)
    assert [r.id for r in s.runs(limit=2)] == [r.id for r in runs[:2]]
    assert s.runs("never-ran") == []
    # The same through a Client of another process's kind.
    with Client(url, table=table) as client:
        assert client.runs("bad") == bad_runs


def test_bad_filters_are_refused_with_what_to_do(migrated: tuple[str, str]) -> None:
    url, table = migrated
    with Client(url, table=table) as client:
        with pytest.raises(ValueError, match="unknown run status 'failed'; use one of success"):
            client.runs(status="failed")
        with pytest.raises(ValueError, match="since must be an aware datetime"):
            client.runs(since=datetime(2026, 1, 1))
        with pytest.raises(ValueError, match="limit must be an integer from 1"):
            client.runs(limit=0)
        with pytest.raises(ValueError, match="must not be empty"):
            client.runs("")


def test_history_none_writes_no_runs_and_no_prune_task(migrated: tuple[str, str]) -> None:
    url, table = migrated
    s = Scheduler(url, table=table, poll_interval=0.1, history=None)
    s.add("ok", lambda: None, schedule=FixedRate(0.2))
    with running(s):
        wait_until(lambda: s.info("ok").reenqueue_attempt >= 3, 10, "three runs")
        assert [t.name for t in s.tasks()] == ["ok"]
    assert rows_of(url, table) == []
    assert s.info("ok").last_success_at is not None  # alerts still know the last success


def test_names_starting_with_dbscheduler_are_reserved(migrated: tuple[str, str]) -> None:
    url, table = migrated
    s = Scheduler(url, table=table)
    message = "names starting with 'dbscheduler.' are reserved"
    with pytest.raises(ValueError, match=f"task 'dbscheduler.mine': {message}"):
        s.add("dbscheduler.mine", lambda: None, schedule=FixedRate(60))
    with pytest.raises(ValueError, match=message):
        s.task(PRUNE_TASK, schedule=FixedRate(60))(lambda: None)
    with pytest.raises(ValueError, match=f"handler 'dbscheduler.h': {message}"):
        s.handler("dbscheduler.h")(lambda: None)
    with pytest.raises(ValueError, match=message):
        s.client.schedule("dbscheduler.x", "h", FixedRate(60))
    with pytest.raises(ValueError, match=f"handler 'dbscheduler.h': {message}"):
        s.client.schedule("mine", "dbscheduler.h", FixedRate(60))
    with pytest.raises(ValueError, match=message):
        s.client.schedule_once("dbscheduler.y", "h", datetime(2031, 1, 1, tzinfo=timezone.utc))
    assert s.tasks() == []  # nothing was written
    # The built-in task itself is operated like any other.
    s.sync()
    assert [t.name for t in s.tasks()] == [PRUNE_TASK]
    assert s.info(PRUNE_TASK).builtin
    s.pause(PRUNE_TASK)
    assert s.info(PRUNE_TASK).paused


def test_a_one_off_jobs_run_stays_after_its_row_is_gone(migrated: tuple[str, str]) -> None:
    url, table = migrated
    s = Scheduler(url, table=table, poll_interval=0.1)
    s.handler("mail")(lambda ctx: None)
    with running(s):
        s.schedule_once("mail-42", "mail", s.client.db_now())
        wait_until(lambda: s.runs("mail-42"), 10, "the job's run")
        wait_until(lambda: "mail-42" not in {t.name for t in s.tasks()}, 60, "its row deleted")
    (run,) = s.runs("mail-42")
    assert run.status == "success"


# -- written with the finish ------------------------------------------------------------------
def test_the_run_rows_cost_on_each_database(migrated: tuple[str, str], backend: str) -> None:
    # PostgreSQL: a whole batch of finishes and their run rows is one statement. MySQL and
    # SQLite: the batch's run rows, then its fenced finishes (two statements). Elsewhere: one
    # run row, then one fenced finish, per execution.
    url, table = migrated
    s = Scheduler(url, table=table, node_id="n1", lease=30)
    for i in range(3):
        s.add(f"t{i}", lambda: None, schedule=FixedRate(3600))
    s.sync()
    store: Store = s._store
    for i in range(3):
        s.trigger(f"t{i}")
    picked = store.pick("n1", 10, timedelta(seconds=30), [f"t{i}" for i in range(3)]).rows
    assert len(picked) == 3
    sent: list[str] = []
    sa.event.listen(s.engine, "before_cursor_execute", lambda *a, **k: sent.append(a[2]))
    store.finish("n1", lambda now: [FinishWrite(
        int(r["id"]), int(r["total_attempt"]), "success", now + timedelta(hours=1), 0, now,
        run=RunRecord(r["queue_name"], int(r["total_attempt"]), 1, "n1",
                      r["last_started_at"], r["last_started_at"])) for r in picked])
    # Not the read of the clock (SQLite reads in a deferred BEGIN of their own).
    writes = [q for q in sent if not q.lstrip().upper().startswith(("SELECT", "BEGIN"))]
    rows = rows_of(url, table)
    assert sorted((r["task_name"], r["token"]) for r in rows) == sorted(
        (r["queue_name"], r["total_attempt"]) for r in picked)
    if backend == "postgresql":
        assert len(writes) == 1, writes
        assert "INSERT INTO" in writes[0] and "UPDATE" in writes[0]
    elif backend in ("mysql", "sqlite"):
        # The batch's run rows in one statement, then its fenced finishes in one.
        assert len(writes) == 2, writes
        assert "INSERT INTO" in writes[0] and writes[1].lstrip().upper().startswith("UPDATE")
    else:
        assert len(writes) == 6, writes
    s.engine.dispose()


def _two_nodes(url: str, table: str) -> tuple[Scheduler, Store, dict[str, Any], dict[str, Any]]:
    """Node a picks ``job``; its lease runs out; node b picks it again (a takeover)."""
    s = Scheduler(url, table=table, lease=30)
    s.add("job", lambda: None, schedule=FixedRate(3600))
    s.sync()
    store: Store = s._store
    s.trigger("job")
    (first,) = store.pick("a", 1, timedelta(seconds=30), ["job"]).rows
    engine = sa.create_engine(url)
    t = store.table
    with engine.begin() as conn:  # the lease expired (node a stopped heartbeating)
        conn.execute(sa.update(t).values(next_process_at=datetime(2020, 1, 1, tzinfo=timezone.utc)))
    engine.dispose()
    (second,) = store.pick("b", 1, timedelta(seconds=30), ["job"]).rows
    assert second["prev_locked_by"] == "a"
    return s, store, first, second


def _lost(store: Store, second: dict[str, Any]) -> None:
    """What node b's recovery writes for the execution it found lost."""
    started = second["prev_last_started_at"]
    assert store.record_lost("b", int(second["id"]), int(second["total_attempt"]), 1,
                             "node a vanished while running it (lease expired)",
                             RunRecord("job", int(second["total_attempt"]) - 1, 1, "a",
                                       started, started))


def _finish(store: Store, node: str, picked: dict[str, Any]) -> list[FinishWrite]:
    started = picked["last_started_at"]
    return store.finish(node, lambda now: [FinishWrite(
        int(picked["id"]), int(picked["total_attempt"]), "success", now + timedelta(hours=1),
        0, now, run=RunRecord("job", int(picked["total_attempt"]), 1, node, started,
                              started))])[1]


def test_a_fenced_off_finish_writes_no_run_row(migrated: tuple[str, str]) -> None:
    url, table = migrated
    s, store, first, second = _two_nodes(url, table)
    _lost(store, second)
    assert _finish(store, "a", first), "node a's finish is refused"
    rows = rows_of(url, table)
    assert [(r["token"], r["node_id"], r["status"]) for r in rows] == [
        (first["total_attempt"], "a", "lost")]
    s.engine.dispose()


def test_a_run_row_written_before_a_crash_is_turned_lost_by_the_takeover(
    migrated: tuple[str, str],
) -> None:
    # Where the run row goes before its finish, node a may die between the two: the row it
    # wrote says success, but the finish never landed. Node b's lost record settles it.
    url, table = migrated
    s, store, first, second = _two_nodes(url, table)
    with store.autocommit() as conn:  # node a wrote it before b's pick, then died:
        fence = (int(first["id"]), int(first["total_attempt"]), "a")
        started = first["last_started_at"]
        log_first(store, conn, fence, RunRecord("job", int(first["total_attempt"]), 1, "a",
                                                 started, started), "success", None)
    _lost(store, second)
    rows = rows_of(url, table)
    assert [(r["token"], r["node_id"], r["status"]) for r in rows] == [
        (first["total_attempt"], "a", "lost")]
    assert "vanished" in rows[0]["error"]
    s.engine.dispose()


def test_a_finish_refused_after_its_run_row_takes_the_row_back(
    migrated: tuple[str, str], backend: str
) -> None:
    if backend == "postgresql":
        pytest.skip("PostgreSQL writes the run row in the finish's statement, never before")
    url, table = migrated
    s = Scheduler(url, table=table, lease=30)
    s.add("job", lambda: None, schedule=FixedRate(3600))
    s.sync()
    store: Store = s._store
    s.trigger("job")
    (picked,) = store.pick("a", 1, timedelta(seconds=30), ["job"]).rows
    run = RunRecord("job", int(picked["total_attempt"]), 1, "a", picked["last_started_at"],
                    picked["last_started_at"])
    with store.autocommit() as conn:  # the run row is written (fence held) …
        log_first(store, conn, (int(picked["id"]), int(picked["total_attempt"]), "a"), run,
                  "success", None)
    assert len(rows_of(url, table)) == 1
    s.delete("job", force=True)  # … then an operator deletes the running task's row
    assert _finish(store, "a", picked), "the finish is refused"
    assert rows_of(url, table) == []
    s.engine.dispose()


# -- retention ---------------------------------------------------------------------------------
def _seed(url: str, table: str, rows: list[tuple[str, int, datetime]]) -> None:
    runs = make_runs_table(table)
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.insert(runs), [
            {"task_name": name, "token": token, "attempt": 1, "node_id": "seed",
             "scheduled_at": at, "started_at": at, "finished_at": at, "status": "success"}
            for name, token, at in rows
        ])
    engine.dispose()


def _prune(s: Scheduler) -> None:
    """Run the built-in prune task through the engine and wait for its own run row."""
    before = len(s.runs(PRUNE_TASK))
    s.trigger(PRUNE_TASK)
    wait_until(lambda: len(s.runs(PRUNE_TASK)) > before, 60, "the prune task's run")
    assert s.runs(PRUNE_TASK)[0].status == "success", s.runs(PRUNE_TASK)[0]


def test_the_prune_task_applies_the_age_and_count_limits(migrated: tuple[str, str]) -> None:
    url, table = migrated
    s = Scheduler(url, table=table, poll_interval=0.1, history=timedelta(hours=1),
                  history_per_task=5)
    with running(s):
        now = s.client.db_now()
        old = [("a", i, now - timedelta(hours=2, minutes=i)) for i in range(10)]
        recent_a = [("a", 100 + i, now - timedelta(minutes=30 - i)) for i in range(8)]
        recent_b = [("b", 200 + i, now - timedelta(minutes=10 - i)) for i in range(3)]
        _seed(url, table, [*old, *recent_a, *recent_b])
        _prune(s)
    kept = {(r.name, r.token) for r in s.runs(limit=1000) if r.name != PRUNE_TASK}
    # a: its 5 newest recent runs; b: all 3; nothing older than an hour.
    assert kept == {("a", 100 + i) for i in range(3, 8)} | {("b", 200 + i) for i in range(3)}


def test_a_big_backlog_is_pruned_in_bounded_batches(migrated: tuple[str, str]) -> None:
    from dbscheduler._store import PRUNE_BATCH

    url, table = migrated
    s = Scheduler(url, table=table, poll_interval=0.1, history=timedelta(days=1))
    with running(s):
        now = s.client.db_now()
        backlog = 3 * PRUNE_BATCH + 500
        _seed(url, table, [(f"t{i % 7}", i, now - timedelta(days=2, seconds=i))
                           for i in range(backlog)])
        deletes: list[int] = []

        def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            if statement.lstrip().upper().startswith("DELETE") and f"{table}_runs" in statement:
                deletes.append(cursor.rowcount)

        sa.event.listen(s.engine, "after_cursor_execute", count)
        _prune(s)
    assert sum(deletes) == backlog
    assert max(deletes) <= PRUNE_BATCH
    assert len(deletes) >= 4, deletes
    assert [r.name for r in s.runs(limit=1000)] == [PRUNE_TASK]
