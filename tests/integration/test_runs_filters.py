"""Finding runs on every real database: by task, node, status and time range, a page at a
time by cursor, through the client, the API, the command line and the runs page."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any

import sqlalchemy as sa
from fastapi.testclient import TestClient

from dbscheduler import Client
from dbscheduler.table import make_runs_table
from dbscheduler.web import create_app
from tests.unit.test_cli import invoke

T10 = datetime(2026, 3, 2, 10, 0, tzinfo=timezone.utc)


def _seed(url: str, table: str) -> list[dict[str, Any]]:
    """Runs of two tasks on two nodes, minutes apart around 10:00, two finished at the same
    instant (the cursor must tell them apart)."""
    rows = []
    for i, (minute, task, node, status) in enumerate((
            (-2, "import", "node-a", "success"), (1, "import", "node-a", "error"),
            (2, "report", "node-b", "success"), (3, "report", "node-a", "success"),
            (3, "import", "node-a", "success"), (4, "import", "node-b", "timeout"),
            (7, "report", "node-a", "success"), (9, "import", "node-a", "success"))):
        at = T10 + timedelta(minutes=minute)
        rows.append({"task_name": task, "token": i + 1, "attempt": 1, "node_id": node,
                     "scheduled_at": at - timedelta(seconds=2),
                     "started_at": at - timedelta(seconds=1),
                     "finished_at": at, "status": status, "error": None})
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.insert(make_runs_table(table)), rows)
    engine.dispose()
    return rows


def _key(run: Any) -> tuple[str, int]:
    return (run.name, run.token)


def test_runs_by_task_node_status_time_and_cursor(migrated: tuple[str, str]) -> None:
    url, table = migrated
    _seed(url, table)
    window = {"since": T10, "until": T10 + timedelta(minutes=5)}
    with Client(url, table=table) as client:
        on_a = client.runs(node="node-a", **window)
        assert [_key(r) for r in on_a] == [("import", 5), ("report", 4), ("import", 2)]
        assert [_key(r) for r in client.runs("import", node="node-b")] == [("import", 6)]
        assert [_key(r) for r in client.runs(status=["error", "timeout"], **window)] == [
            ("import", 6), ("import", 2)]
        # Pages of four by cursor: every run once, in order, the two runs finished at 10:03
        # on either side of the first page's end.
        everything = [_key(r) for r in client.runs(limit=100)]
        assert len(everything) == 8
        walked: list[tuple[str, int]] = []
        cursor = None
        while True:
            page = client.runs(limit=4, cursor=cursor)
            walked += [_key(r) for r in page]
            if len(page) < 4:
                break
            cursor = page[-1].cursor
        assert walked == everything
        try:
            client.runs(cursor="not-a-cursor")
        except ValueError as exc:
            assert "not one a runs listing gave" in str(exc)
        else:
            raise AssertionError("a bad cursor was accepted")

    with TestClient(create_app(url, table=table)) as http:
        params = {"node": "node-a", "since": T10.isoformat(),
                  "until": (T10 + timedelta(minutes=5)).isoformat(), "limit": "2"}
        first = http.get("/api/runs", params=params).json()
        assert [(r["name"], r["token"]) for r in first["runs"]] == [("import", 5), ("report", 4)]
        second = http.get("/api/runs", params={**params, "cursor": first["next_cursor"]}).json()
        assert [(r["name"], r["token"]) for r in second["runs"]] == [("import", 2)]
        assert second["next_cursor"] is None
        only = http.get("/api/runs", params={"task": "report", "node": "node-b"}).json()
        assert [(r["name"], r["token"]) for r in only["runs"]] == [("report", 3)]
        bad = http.get("/api/runs", params={"cursor": "zzz"})
        assert bad.status_code == 422 and bad.json()["error"] == "invalid"

        page = http.get("/runs", params={"node": "node-a", "since": "2026-03-02T10:00:00",
                                         "until": "2026-03-02T10:05:00Z"}).text
        assert page.count('<tr class="') == 3 and "3 runs" in page and "on node-a" in page

    db = ["--url", url, "--table", table]
    out = invoke("runs", "--node", "node-a", "--since", "2026-03-02T10:00:00Z",
                 "--until", "2026-03-02T10:05:00Z", "--json", *db)
    assert [(r["name"], r["token"]) for r in json.loads(out.stdout)] == [
        ("import", 5), ("report", 4), ("import", 2)]
    paged = invoke("runs", "--limit", "7", *db, env={"COLUMNS": "250"})
    assert paged.exit_code == 0 and "older ones: --cursor " in paged.stdout
    cursor = paged.stdout.split("--cursor ")[1].split(")")[0]
    rest = json.loads(invoke("runs", "--cursor", cursor, "--json", *db).stdout)
    assert [(r["name"], r["token"]) for r in rest] == [("import", 1)]


def test_runs_per_minute_over_the_last_hour(migrated: tuple[str, str]) -> None:
    url, table = migrated
    with Client(url, table=table) as client:
        now = client.db_now()
        recent, older = now - timedelta(minutes=2), now - timedelta(minutes=30)
        rows = [(recent, "success"), (recent, "success"), (recent, "error"),
                (recent, "cancelled"), (older, "timeout"), (now - timedelta(hours=2), "error")]
        engine = sa.create_engine(url)
        with engine.begin() as conn:
            conn.execute(sa.insert(make_runs_table(table)), [
                {"task_name": "t", "token": i + 1, "attempt": 1, "node_id": "n",
                 "scheduled_at": at, "started_at": at, "finished_at": at, "status": status,
                 "error": None} for i, (at, status) in enumerate(rows)])
        engine.dispose()
        minutes = client.throughput(60)
        assert len(minutes) == 60 and minutes[-1][0] == now.replace(second=0, microsecond=0)
        by_minute = {m: (ok, failed) for m, ok, failed in minutes}
        assert by_minute[recent.replace(second=0, microsecond=0)] == (2, 1)
        assert by_minute[older.replace(second=0, microsecond=0)] == (0, 1)
        assert sum(ok for _, ok, _ in minutes) == 2 and sum(f for _, _, f in minutes) == 2
    with TestClient(create_app(url, table=table)) as http:
        page = http.get("/").text
    assert 'id="throughput"' in page and "2 succeeded" in page and "2 failed" in page
