"""The database side of the freeze tests: the table as the test sees it (snapshots, pauses),
a trigger that makes one node's statements slow, what the server says about sessions that
hold locks (so that a failure names its cause), and whether the shared server restarted.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa


def admin_engine(url: str) -> sa.Engine:
    """An engine for the test's own statements, which never wait long for a lock."""
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    setup = {
        "postgresql": "SET lock_timeout = '5s'",
        "mysql": "SET SESSION innodb_lock_wait_timeout = 5",
    }.get(engine.dialect.name)
    if setup is not None:
        @sa.event.listens_for(engine, "connect")
        def _timeouts(dbapi_conn: Any, record: Any) -> None:
            cursor = dbapi_conn.cursor()
            cursor.execute(setup)
            cursor.close()
            dbapi_conn.commit()  # the session setting stays; no transaction is left open
    return engine


def snapshot(url: str, table: str) -> list[dict[str, Any]]:
    """Every row of the table, every column, by id."""
    from dbscheduler.table import make_table

    t = make_table(table)
    engine = admin_engine(url)
    try:
        with engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(sa.select(t).order_by(t.c.id))]
    finally:
        engine.dispose()


def stable_snapshot(url: str, table: str, timeout: float = 5.0) -> list[dict[str, Any]]:
    """A snapshot that two reads 0.2 s apart agree on (a statement of a killed node may still
    be finishing on the server)."""
    deadline = time.monotonic() + timeout
    last = snapshot(url, table)
    while True:
        time.sleep(0.2)
        now = snapshot(url, table)
        if now == last or time.monotonic() > deadline:
            return now
        last = now


def changed_rows(before: Sequence[Mapping[str, Any]],
                 after: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per row that differs (added, removed or any column changed)."""
    old = {r["id"]: r for r in before}
    new = {r["id"]: r for r in after}
    out = []
    for id_ in sorted(old.keys() | new.keys()):
        a, b = old.get(id_), new.get(id_)
        if a != b:
            cols = sorted(k for k in (a or b or {}) if (a or {}).get(k) != (b or {}).get(k))
            name = (a or b or {}).get("queue_name")
            out.append(f"{name}: " + ", ".join(
                f"{c} {(a or {}).get(c)!r} -> {(b or {}).get(c)!r}" for c in cols))
    return out


def pause_all(url: str, table: str, names: Sequence[str]) -> None:
    """Pause ``names`` (nobody picks them again; running executions go on)."""
    from dbscheduler.table import make_table

    t = make_table(table)
    engine = admin_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.update(t).where(t.c.queue_name.in_(names)).values(paused=True))
    finally:
        engine.dispose()


def describe_rows(url: str, table: str, tasks: Sequence[str]) -> str:
    try:
        rows = [r for r in snapshot(url, table) if r["queue_name"] in tasks]
    except Exception as exc:  # a diagnostic must never hide the real failure
        return f"(could not read: {exc})"
    return "; ".join(f"{r['queue_name']} locked_by={r['locked_by']} token={r['total_attempt']} "
                     f"next={r['next_process_at']}" for r in rows)


def lock_holders(url: str, backend: str, table: str) -> str:
    """What the server says about sessions of this table that are idle inside a transaction
    or waiting for a lock: the cause when a takeover did not happen."""
    queries = {
        "postgresql": ("SELECT pid, state, wait_event_type, left(query, 80) FROM "
                       "pg_stat_activity WHERE (state LIKE 'idle in transaction%' OR "
                       "wait_event_type = 'Lock') AND query LIKE :pat"),
        "mysql": ("SELECT trx_mysql_thread_id, trx_state, trx_started, "
                  "left(coalesce(trx_query, ''), 80) FROM information_schema.innodb_trx"),
    }
    if backend not in queries:
        return "n/a"
    engine = admin_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.text(queries[backend]), {"pat": f"%{table}%"}).all()
        return "; ".join(" | ".join(str(v) for v in r) for r in rows) or "none"
    except Exception as exc:
        return f"(could not read: {exc})"
    finally:
        engine.dispose()


def install_slow_trigger(url: str, backend: str, table: str, node_prefix: str,
                         seconds: float, taking_only: bool = False) -> None:
    """Make every UPDATE of a row held by, or being taken by, a node whose name starts with
    ``node_prefix`` take ``seconds`` longer per row (the statement sleeps on the server);
    with ``taking_only``, only the UPDATEs that leave the row held by such a node."""
    engine = admin_engine(url)
    pat = node_prefix.replace("'", "") + "%"
    name = f"{table}_slow"
    cond = f"(NEW.locked_by LIKE '{pat}' OR OLD.locked_by LIKE '{pat}')"
    if taking_only:
        cond = f"(NEW.locked_by LIKE '{pat}')"
    try:
        with engine.begin() as conn:
            if backend == "postgresql":
                conn.execute(sa.text(
                    f"CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                    f"IF {cond} THEN PERFORM pg_sleep({seconds}); END IF; RETURN NEW; END $$"))
                conn.execute(sa.text(f"CREATE TRIGGER {name} BEFORE UPDATE ON {table} "
                                     f"FOR EACH ROW EXECUTE FUNCTION {name}()"))
            elif backend == "mysql":
                conn.execute(sa.text(
                    f"CREATE TRIGGER {name} BEFORE UPDATE ON {table} FOR EACH ROW BEGIN "
                    f"IF {cond} THEN SET @{name} = (SELECT SLEEP({seconds})); "
                    "END IF; END"))
            else:
                raise ValueError(f"no slow trigger on {backend}")
    finally:
        engine.dispose()


def drop_slow_trigger(url: str, backend: str, table: str) -> None:
    engine = admin_engine(url)
    name = f"{table}_slow"
    try:
        with engine.begin() as conn:
            if backend == "postgresql":
                conn.execute(sa.text(f"DROP TRIGGER IF EXISTS {name} ON {table}"))
                conn.execute(sa.text(f"DROP FUNCTION IF EXISTS {name}()"))
            else:
                conn.execute(sa.text(f"DROP TRIGGER IF EXISTS {name}"))
    except Exception:
        pass
    finally:
        engine.dispose()


def sleeping_sessions(conn: sa.Connection, backend: str, table: str) -> int:
    """Statements on ``table`` sleeping in the slow trigger right now."""
    if backend == "postgresql":
        sql = ("SELECT count(*) FROM pg_stat_activity WHERE state = 'active' "
               "AND wait_event = 'PgSleep' AND query LIKE :pat AND pid <> pg_backend_pid()")
        pat = f"%{table}%"
    else:
        # MariaDB shows the trigger's own statement, which names its variable.
        sql = ("SELECT count(*) FROM information_schema.processlist WHERE command = 'Query' "
               "AND state = 'User sleep' AND info LIKE :pat AND id <> connection_id()")
        pat = f"%{table}_slow%"
    return int(conn.execute(sa.text(sql), {"pat": pat}).scalar_one())


def server_started(url: str, backend: str) -> float | None:
    """When the database server last started (epoch seconds, to the second), None if it
    cannot be told (unreachable now)."""
    sql = {
        "postgresql": "SELECT extract(epoch FROM pg_postmaster_start_time())",
        "mysql": ("SELECT unix_timestamp() - VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS "
                  "WHERE VARIABLE_NAME = 'UPTIME'"),
    }.get(backend)
    if sql is None:
        return None
    engine = admin_engine(url)
    try:
        with engine.connect() as conn:
            return float(conn.execute(sa.text(sql)).scalar_one())
    except Exception:
        return None
    finally:
        engine.dispose()


def restarted_since(url: str, backend: str, started: float | None) -> bool:
    """The server restarted (or is down) since ``started`` (:func:`server_started`)."""
    if started is None:
        return False
    deadline = time.monotonic() + 30
    now = server_started(url, backend)
    while now is None and time.monotonic() < deadline:  # down: wait until it is back
        time.sleep(0.5)
        now = server_started(url, backend)
    return now is None or abs(now - started) > 2.0


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else 0.0
