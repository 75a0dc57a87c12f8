"""``dbscheduler schedule``/``unschedule``/``sync`` and what ``list``/``show`` say about
runtime tasks, against real databases."""

from __future__ import annotations

import json
import textwrap
import uuid
from pathlib import Path

import pytest

from dbscheduler import Client, FixedRate, Once
from dbscheduler._engine.history import PRUNE_TASK
from tests.unit.test_cli import assert_fails, invoke


def test_schedule_list_show_unschedule_round_trip(migrated: tuple[str, str]) -> None:
    url, table = migrated
    db = ["--url", url, "--table", table]
    done = invoke("schedule", "mail-7", "--handler", "send-mail", "--every", "30",
                  "--data", '{"to": "ops@example.com", "n": 7}', *db)
    assert done.exit_code == 0, done.output
    once = invoke("schedule", "one-off", "--handler", "send-mail",
                  "--at", "2020-01-02T03:04:05+02:00", *db)
    assert once.exit_code == 0, once.output
    cron = invoke("schedule", "nightly", "--handler", "report", "--cron", "0 3 * * *",
                  "--tz", "Europe/Berlin", *db)
    assert cron.exit_code == 0, cron.output

    listed = json.loads(invoke("list", "--json", *db).stdout)
    by_name = {t["name"]: t for t in listed}
    assert by_name["mail-7"]["handler"] == "send-mail"
    assert by_name["mail-7"]["data"] == {"to": "ops@example.com", "n": 7}
    assert by_name["mail-7"]["schedule"] == "fixed-rate 30s"
    assert by_name["one-off"]["schedule"] == "once 2020-01-02T01:04:05+00:00"
    assert by_name["nightly"]["schedule"] == "cron 0 3 * * * Europe/Berlin"
    with Client(url, table=table) as client:
        assert client.info("mail-7").data == {"to": "ops@example.com", "n": 7}

    # Long overdue and never picked: no running node has its handler, and the list says so.
    table_out = invoke("list", *db).stdout
    line = next(x for x in table_out.splitlines() if x.strip().startswith("one-off"))
    assert "unknown" in line
    shown = invoke("show", "mail-7", *db).stdout
    assert "send-mail" in shown and '"ops@example.com"' in shown

    # Updating keeps the row (and its counters); the data is replaced.
    again = invoke("schedule", "mail-7", "--handler", "send-mail", "--every", "30",
                   "--data", '{"n": 8}', *db)
    assert again.exit_code == 0, again.output
    with Client(url, table=table) as client:
        assert client.info("mail-7").data == {"n": 8}

    assert invoke("unschedule", "mail-7", *db).exit_code == 0
    assert_fails(invoke("unschedule", "mail-7", *db), 1, "no task 'mail-7'")
    assert "mail-7" not in invoke("list", *db).stdout


@pytest.mark.parametrize(("args", "fragment"), [
    (["--every", "5", "--data", "{not json"], "--data"),
    (["--at", "2030-01-01T00:00:00"], "no UTC offset"),
    (["--cron", "61 * * * *"], "61"),
    (["--every", "5", "--delay", "3"], "exactly one"),
    ([], "exactly one"),
])
def test_bad_input_writes_nothing(migrated: tuple[str, str], args: list[str],
                                  fragment: str) -> None:
    url, table = migrated
    result = invoke("schedule", "job", "--handler", "h", *args, "--url", url, "--table", table)
    assert result.exit_code == 2, result.output
    assert fragment in result.stderr
    with Client(url, table=table) as client:
        assert client.tasks() == []


def test_sync_writes_the_declared_rows_without_starting(
    migrated: tuple[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, table = migrated
    module = f"syncapp_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(f"""
        from dbscheduler import Scheduler, FixedRate
        scheduler = Scheduler({url!r}, table={table!r})

        @scheduler.task("declared", schedule=FixedRate(3600))
        def declared(ctx): pass

        @scheduler.handler("only-a-handler")
        def handler(ctx): pass
    """))
    monkeypatch.chdir(tmp_path)
    result = invoke("sync", f"{module}:scheduler")
    assert result.exit_code == 0, result.output
    with Client(url, table=table) as client:
        infos = client.tasks()
        # The declared task, and dbscheduler's own pruning task that every node writes.
        assert [(i.name, i.handler, i.schedule, i.total_attempt) for i in infos] == [
            (PRUNE_TASK, PRUNE_TASK, "fixed-rate 600s", 0),
            ("declared", "declared", "fixed-rate 3600s", 0)]
        # A runtime task written next to it is left alone by a later sync.
        client.schedule("runtime", "only-a-handler", FixedRate(60))
        client.schedule_once("later", "only-a-handler",
                             Once(client.db_now()).at.replace(year=2099))
    assert invoke("sync", f"{module}:scheduler").exit_code == 0
    with Client(url, table=table) as client:
        assert sorted(i.name for i in client.tasks()) == [
            PRUNE_TASK, "declared", "later", "runtime"]
