"""``dbscheduler list`` in a narrow terminal: names stay whole, the least needed columns go
(and the caption says which); ``-o wide`` shows every column."""

from __future__ import annotations

from dbscheduler import Client, FixedRate
from tests.unit.test_cli import invoke

LONG = "reports/customer-acme-international-weekly-summary"


def test_a_narrow_terminal_keeps_names_whole(migrated: tuple[str, str]) -> None:
    url, table = migrated
    with Client(url, table=table) as client:
        client.schedule(LONG, "send-report", FixedRate(3600), priority=7)
        client.schedule("cleanup", "housekeeping", FixedRate(600))
    db = ["--url", url, "--table", table]
    narrow = invoke("list", *db, env={"COLUMNS": "100"})
    assert narrow.exit_code == 0, narrow.output
    lines = narrow.stdout.splitlines()
    assert any(LONG in line for line in lines), narrow.stdout  # whole, on one line
    assert all(len(line) <= 100 for line in lines), narrow.stdout
    assert "left out to fit: options, paused" in narrow.stdout and "(-o wide)" in narrow.stdout
    assert "priority=7" not in narrow.stdout  # the options column went first

    wide = invoke("list", "-o", "wide", *db, env={"COLUMNS": "100"})
    assert wide.exit_code == 0, wide.output
    assert "priority=7" in wide.stdout and "paused" in wide.stdout
    assert any(LONG in line for line in wide.stdout.splitlines())
    assert "left out" not in wide.stdout
    # Piped without COLUMNS: every column, as before.
    assert "priority=7" in invoke("list", *db).stdout
