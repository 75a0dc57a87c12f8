"""``dbscheduler schedule-many`` / ``schedule-once-many`` / ``push-many``: JSON lines from
stdin, against real databases."""

from __future__ import annotations

import json

from click.testing import CliRunner, Result

from dbscheduler import Client
from dbscheduler.cli import cli
from tests.unit.test_cli import assert_fails


def feed(text: str, *args: str) -> Result:
    env: dict[str, str | None] = {"DBSCHEDULER_URL": None, "DBSCHEDULER_TABLE": None}
    return CliRunner().invoke(cli, list(args), input=text, env=env, catch_exceptions=False)


def lines(*objects: object) -> str:
    return "".join(json.dumps(o) + "\n" for o in objects)


def test_json_lines_create_tasks_jobs_and_pushes(migrated: tuple[str, str]) -> None:
    url, table = migrated
    db = ["--url", url, "--table", table]
    done = feed(lines({"name": "r-1", "handler": "report", "schedule": "fixed-rate 60s"},
                      {"name": "r-2", "handler": "report", "schedule": "cron 0 3 * * * UTC",
                       "data": {"n": 2}, "priority": 3}) + "\n",
                "schedule-many", *db)
    assert done.exit_code == 0 and done.stdout == "scheduled 2\n", done.output
    jobs = feed(lines(*({"name": f"mail-{i}", "handler": "send-mail",
                         "at": "2030-01-01T08:00:00+01:00", "data": {"i": i}}
                        for i in range(1500))), "schedule-once-many", *db)
    assert jobs.exit_code == 0 and jobs.stdout == "scheduled 1500\n", jobs.output
    pushed = feed(lines({"key": "ann", "item": 1, "handler": "digest"},
                        {"key": "ann", "item": 2, "handler": "digest", "update": "once",
                         "ontime": 1900000000}), "push-many", *db)
    assert pushed.exit_code == 0 and pushed.stdout == "pushed 2\n", pushed.output
    with Client(url, table=table) as client:
        assert client.info("r-2").data == {"n": 2} and client.info("r-2").options == {
            "priority": 3}
        assert client.info("mail-1499").schedule == "once 2030-01-01T07:00:00+00:00"
        assert [(b.key, b.items) for b in client.batches("digest")] == [("ann", 2)]
        assert client.counts().total == 2 + 1500 + 1


def test_a_bad_line_is_named_and_nothing_is_written(migrated: tuple[str, str]) -> None:
    url, table = migrated
    db = ["--url", url, "--table", table]
    good = {"name": "ok", "handler": "h", "at": "2030-01-01T00:00:00Z"}
    naive = {"name": "naive", "handler": "h", "at": "2030-01-01T00:00:00"}
    assert_fails(feed(lines(good) + "\n" + lines(naive), "schedule-once-many", *db), 1,
                 "line 3 ('naive'): at:", "no UTC offset", "nothing was written")
    assert_fails(feed(lines(good) + "{oops\n", "schedule-once-many", *db), 2,
                 "line 2: not JSON")
    assert_fails(feed("[1, 2]\n", "push-many", *db), 2, "line 1: a JSON object is expected")
    with Client(url, table=table) as client:
        assert client.tasks() == []
