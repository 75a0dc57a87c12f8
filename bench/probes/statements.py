"""``python -m bench.probes.statements``: statements and round trips per execution, per dialect.

One node with ``--tasks`` no-op tasks (``FixedRate``, spread over the period) runs for
``--seconds`` on each database; every statement the engine sends is counted at the driver with
SQLAlchemy's ``before_cursor_execute`` event (an ``executemany`` is one event, and one round
trip on PostgreSQL, but one round trip per row on PyMySQL for UPDATEs). Statements are grouped
by what they are (pick, finish, poll, heartbeat …) and divided by the executions that ran.

Usage::

    python -m bench.probes.statements [--url URL ...] [--tasks 200] [--period 0.5] [--seconds 6]
"""

from __future__ import annotations

import argparse
import re
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from dbscheduler import FixedRate, Scheduler
from dbscheduler.migrate import upgrade

DEFAULT_URLS = (
    "postgresql+psycopg://postgres@127.0.0.1:5432/test",
    "mysql+pymysql://root@127.0.0.1:3306/test",
    "sqlite:///{tmp}/statements.db",
)


def kind(sql: str) -> str:
    """What an engine statement is, from its text."""
    text = " ".join(sql.split()).lower()
    # MariaDB's pick update carries a per-statement setting: SET STATEMENT x=1 FOR UPDATE …
    text = re.sub(r"^set statement .*? for (?=update )", "", text)
    if text.startswith(("begin", "commit", "rollback", "savepoint", "release")):
        return "transaction control"
    if "set isolation" in text or text.startswith(("set ", "show ")):
        return "session set-up"
    if "_runs" in text and text.startswith("insert") and "update" not in text:
        return "finish: run row (written first)"
    if text.startswith("delete") and "_runs" in text:
        return "finish: run row removed"
    if "claim" in text and ("prev_locked_by" in text or "skip locked" in text):
        return "pick"
    if text.startswith("select") and "claim =" in text:
        return "pick: read back"
    if text.startswith("select") and text.endswith("for update skip locked"):
        return "pick: choose ids"
    if "heartbeat_at" in text and text.startswith("update") and "claim" not in text:
        return "heartbeat"
    if "last_finished_at" in text and ("update" in text or "delete" in text):
        return "finish"
    if "pg_notify" in text:
        return "notify"
    if re.search(r"\bmax\(.*\.id\)|next_due|min\(", text) and text.startswith(("select", "with")):
        return "poll"
    return "other: " + text[:60]


def measure(url: str, tasks: int, period: float, seconds: float) -> dict[str, Any]:
    table = "stmt_" + uuid.uuid4().hex[:8]
    ran = Counter[str]()
    lock = threading.Lock()
    upgrade(sa.create_engine(url, poolclass=sa.NullPool), table)
    scheduler = Scheduler(url, table=table, max_workers=32, lease=10, poll_interval=1)
    sent: Counter[str] = Counter()
    executemany_rows: Counter[str] = Counter()
    counting = threading.Event()

    def count(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any,
              executemany: bool) -> None:
        if counting.is_set():
            k = kind(statement)
            sent[k] += 1
            if executemany:
                executemany_rows[k] += len(parameters)

    sa.event.listen(scheduler.engine, "before_cursor_execute", count)

    def make(i: int) -> Any:
        def noop() -> None:
            with lock:
                ran["n"] += 1
        return noop

    for i in range(tasks):
        scheduler.add(f"s{i}", make(i), schedule=FixedRate(period))
    scheduler.start()
    try:
        time.sleep(2.0)  # past start-up: registration, the first polls
        with lock:
            before = ran["n"]
        counting.set()
        time.sleep(seconds)
        counting.clear()
        with lock:
            executions = ran["n"] - before
    finally:
        scheduler.shutdown(timeout=10)
        with scheduler.engine.begin() as conn:
            for suffix in ("_runs", "_items", "_groups", ""):
                conn.execute(sa.text(f"DROP TABLE IF EXISTS {table}{suffix}"))
            if scheduler.engine.dialect.name != "sqlite":
                conn.execute(sa.text(f"DROP TABLE IF EXISTS {table}_version"))
        scheduler.engine.dispose()
    return {"url": url, "executions": executions, "sent": sent,
            "executemany_rows": executemany_rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", action="append")
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--period", type=float, default=0.5)
    parser.add_argument("--seconds", type=float, default=6.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        urls = [u.format(tmp=tmp) for u in (args.url or DEFAULT_URLS)]
        Path(tmp).mkdir(exist_ok=True)
        for url in urls:
            out = measure(url, args.tasks, args.period, args.seconds)
            n = max(out["executions"], 1)
            name = sa.engine.make_url(url).get_backend_name()
            total = sum(out["sent"].values())
            print(f"\n{name}: {out['executions']} executions in {args.seconds:g} s, "
                  f"{total} statements = {total / n:.3f} per execution")
            for k, c in out["sent"].most_common():
                rows = out["executemany_rows"].get(k)
                extra = f" (executemany, {rows} rows)" if rows else ""
                print(f"  {k:40s} {c:6d}  {c / n:.3f}/exec{extra}")


if __name__ == "__main__":
    main()
