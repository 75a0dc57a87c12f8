"""What the surfaces that show the table cost at its size: ``python -m bench.probes.surfaces``.

The tasks page, its live refresh, ``/api/tasks?limit=1``, a filtered ``/api/tasks``,
``/api/health``, ``Scheduler.health()`` and ``dbscheduler list --json`` (a page, and with
``--limit 0`` every row, streamed) are timed on tables of 1,000, 10,000 and 100,000 rows, on
PostgreSQL and MariaDB servers of their own (the test suite's throwaway servers, started from
the local binaries and removed at the end). Each figure is the median of ``--repeat`` calls
after one to warm up, in-process (the web app through its test client, the CLI through
click's runner: no process start-up counted). The goal at 100,000 rows: the page, the API and
health within 150 ms; ``list --json`` within 3 s.

Then the plans: PostgreSQL's ``EXPLAIN (ANALYZE, BUFFERS)`` and MariaDB's ``ANALYZE
FORMAT=JSON`` of the page's statement (50 rows, batch keys left out) and of the counting
aggregate, at the largest size: how many rows each reads.

``--runs 2000000`` puts that many run rows (a day old, one in 10,000 ``cancelled``) beside each
table: the runs page, its rare-status filter, ``/api/runs`` and a task's page read them.

``--url`` measures one database of your own instead (a throwaway table is made and dropped);
``--sizes 1000,10000`` changes the sizes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from click.testing import CliRunner
from fastapi.testclient import TestClient

from bench.infra import log
from bench.probes.history import seed_runs
from dbscheduler import Client, FixedRate, Scheduler
from dbscheduler._store.listing import Listing, count_statement, listing_statement
from dbscheduler.cli import cli
from dbscheduler.migrate import upgrade
from dbscheduler.web import create_app
from dbscheduler.web.views import COUNT_CAP
from tests.databases import drop_table

SIZES = (1_000, 10_000, 100_000)
GOAL_MS = 150.0
LIST_GOAL_S = 3.0


def fill(client: Client, n: int) -> None:
    """``n`` runtime tasks on 200 handlers: a fifth paused, a seventh failing, a third late."""
    for start in range(0, n, 10_000):
        client.schedule_many([(f"r-{i:07d}", f"h-{i % 200:03d}", FixedRate(3600))
                              for i in range(start, min(n, start + 10_000))])
    t = client._store.table
    number = sa.cast(sa.func.substr(t.c.queue_name, 3), sa.Integer())
    with client.engine.begin() as conn:
        conn.execute(sa.update(t).where(number % 5 == 0).values(paused=True))
        conn.execute(sa.update(t).where(number % 7 == 0).values(last_status="error"))
        late = client.db_now() - timedelta(hours=1)
        conn.execute(sa.update(t).where(number % 3 == 0).values(next_process_at=late))
    client.push("ann@example.com", {"n": 1}, handler="digest")
    with client.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        analyze = "ANALYZE" if client.engine.dialect.name == "postgresql" else "ANALYZE TABLE"
        conn.exec_driver_sql(f"{analyze} {t.name}")


def _median_ms(action: Callable[[], Any], repeat: int) -> float:
    action()  # warm: connections, templates, the table's metadata
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def _cli(*args: str) -> Callable[[], Any]:
    runner = CliRunner()

    def run() -> None:
        result = runner.invoke(cli, list(args), catch_exceptions=False)
        assert result.exit_code == 0, result.output

    return run


def surfaces(client: Client, url: str, table: str, http: TestClient, scheduler: Scheduler
             ) -> Iterator[tuple[str, Callable[[], Any], float]]:
    """``(name, action, goal in ms)`` of each surface."""

    def get(path: str) -> Callable[[], Any]:
        def call() -> None:
            answer = http.get(path)
            assert answer.status_code == 200, (path, answer.status_code, answer.text[:200])
        return call

    yield "tasks page", get("/"), GOAL_MS
    yield "live refresh", get("/partials/tasks"), GOAL_MS
    yield "tasks page ?state=failing&q=r-00", get("/?state=failing&q=r-00"), GOAL_MS
    yield "/api/tasks?limit=1", get("/api/tasks?limit=1"), GOAL_MS
    yield "/api/tasks?state=paused&limit=50", get("/api/tasks?state=paused&limit=50"), GOAL_MS
    yield "/api/health", get("/api/health"), GOAL_MS
    yield "runs page", get("/runs"), GOAL_MS
    yield "runs page ?status=cancelled", get("/runs?status=cancelled"), GOAL_MS
    yield "/api/runs?status=cancelled&limit=50", get("/api/runs?status=cancelled&limit=50"), \
        GOAL_MS
    yield "task page (its runs)", get("/tasks/r-0000007"), GOAL_MS
    yield "Scheduler.health()", scheduler.health, GOAL_MS
    yield "list --json (a page of 100)", _cli(
        "list", "--json", "--url", url, "--table", table), LIST_GOAL_S * 1000
    yield "list (table, a page of 100)", _cli(
        "list", "--url", url, "--table", table), LIST_GOAL_S * 1000
    yield "list --json --limit 0 (every row)", _cli(
        "list", "--json", "--limit", "0", "--url", url, "--table", table), float("nan")


def plans(client: Client) -> list[str]:
    """How many rows the page's statement and the count read, as the server says."""
    store = client._store
    out = []
    page = listing_statement(store, Listing(batch_keys=False), 50)
    counts = count_statement(store, Listing(batch_keys=False), COUNT_CAP)
    by_handler = listing_statement(store, Listing(handler="h-007", batch_keys=False), 50)
    for label, stmt in (("page of 50", page), ("page of 50, one handler", by_handler),
                        (f"counts (at most {COUNT_CAP + 1} rows)", counts)):
        compiled = stmt.compile(client.engine, compile_kwargs={"render_postcompile": True})
        with client.engine.connect() as conn:
            if client.engine.dialect.name == "postgresql":
                plan = conn.exec_driver_sql(
                    f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {compiled}", compiled.params
                ).scalar_one()
                root = (plan if isinstance(plan, list) else json.loads(plan))[0]
                scanned = sum(n.get("Actual Rows", 0) * n.get("Actual Loops", 1)
                              for n in _nodes(root["Plan"]) if "Scan" in n["Node Type"])
                out.append(f"  {label}: {root['Execution Time']:.1f} ms, rows out of scans "
                           f"{scanned:.0f}, shared buffers hit "
                           f"{root['Plan'].get('Shared Hit Blocks', 0)}; top node "
                           f"{root['Plan']['Node Type']}")
            else:
                text = conn.exec_driver_sql(f"ANALYZE FORMAT=JSON {compiled}",
                                            compiled.params).scalar_one()
                rows = list(_r_rows(json.loads(text)))
                out.append(f"  {label}: tables read {', '.join(rows)}")
    return out


def _nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from _nodes(child)


def _r_rows(value: Any) -> Iterator[str]:
    """Each table access of a MariaDB ``ANALYZE FORMAT=JSON``: its name, how it read
    (``access_type``, the index) and ``r_rows`` × ``r_loops``."""
    if isinstance(value, dict):
        if "table_name" in value and "r_rows" in value:
            loops = value.get("r_loops", 1)
            yield (f"{value['table_name']} {value.get('access_type', '?')}"
                   f"({value.get('key', '-')}) {float(value['r_rows']) * loops:.0f} rows")
        for child in value.values():
            yield from _r_rows(child)
    elif isinstance(value, list):
        for child in value:
            yield from _r_rows(child)


def measure(url: str, sizes: tuple[int, ...], repeat: int, runs: int = 0
            ) -> list[tuple[str, int, str, float, float]]:
    backend = sa.engine.make_url(url).get_backend_name()
    results = []
    for n in sizes:
        table = f"bench_surfaces_{uuid.uuid4().hex[:8]}"
        engine = sa.create_engine(url)
        upgrade(engine, table)
        engine.dispose()
        client = Client(url, table=table)
        try:
            started = time.perf_counter()
            fill(client, n)
            log(f"{backend}: {n} rows written in {time.perf_counter() - started:.1f} s")
            if runs:
                started = time.perf_counter()
                seed_runs(client.engine, table, runs, days_ago=1, tasks=min(n, 1000),
                          prefix="r-", width=7, rare=10_000)
                log(f"{backend}: {runs} run rows written in "
                    f"{time.perf_counter() - started:.1f} s")
            scheduler = Scheduler(url, table=table)
            with TestClient(create_app(client)) as http:
                for name, action, goal in surfaces(client, url, table, http, scheduler):
                    ms = _median_ms(action, repeat if "limit 0" not in name else 1)
                    results.append((backend, n, name, ms, goal))
                    log(f"{backend} {n:>7} {name}: {ms:.1f} ms")
            if n == max(sizes):
                for line in plans(client):
                    log(f"{backend} {n} plan:{line}")
            scheduler.engine.dispose()
        finally:
            client.close()
            drop_table(url, table)
    return results


def report(results: list[tuple[str, int, str, float, float]], sizes: tuple[int, ...]) -> str:
    names = list(dict.fromkeys(r[2] for r in results))
    backends = list(dict.fromkeys(r[0] for r in results))
    lines = []
    for backend in backends:
        lines.append(f"\n{backend}: median ms per call")
        lines.append(f"{'surface':<38}" + "".join(f"{n:>12,}" for n in sizes) + "   goal")
        for name in names:
            cells = {r[1]: (r[3], r[4]) for r in results if r[0] == backend and r[2] == name}
            goal = next(iter(cells.values()))[1] if cells else float("nan")
            row = "".join(f"{cells[n][0]:>12.1f}" if n in cells else f"{'-':>12}"
                          for n in sizes)
            goal_text = "-" if goal != goal else f"<= {goal:g}"
            lines.append(f"{name:<38}{row}   {goal_text}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="one database of your own instead of private servers")
    parser.add_argument("--sizes", default=",".join(str(s) for s in SIZES))
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--backends", default="postgresql,mysql")
    parser.add_argument("--runs", type=int, default=0,
                        help="run-history rows beside each table (one in 10,000 cancelled)")
    args = parser.parse_args(argv)
    sizes = tuple(int(s) for s in args.sizes.split(","))
    results = []
    if args.url:
        results += measure(args.url, sizes, args.repeat, args.runs)
    else:
        from tests.servers import PrivateMariaDB, PrivatePostgres, throwaway

        for kind in args.backends.split(","):
            cls = PrivatePostgres if kind == "postgresql" else PrivateMariaDB
            log(f"starting a private {cls.label} …")
            server = throwaway(cls)
            try:
                results += measure(server.url, sizes, args.repeat, args.runs)
            finally:
                server.remove()
    print(report(results, sizes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
