"""The execution controls on the command line: ``schedule`` takes the options, ``list`` and
``show`` print them, ``groups`` shows running/limit and sets limits, against real databases."""

from __future__ import annotations

import json

from dbscheduler import Client
from tests.unit.test_cli import assert_fails, invoke


def test_schedule_takes_the_options_and_list_show_print_them(migrated: tuple[str, str]) -> None:
    url, table = migrated
    db = ["--url", url, "--table", table]
    done = invoke("schedule", "resize", "--handler", "img", "--every", "30", "--priority", "7",
                  "--group", "images", "--requires", "gpu", "--timeout", "120",
                  "--isolation", "process", "--misfire", "skip", "--grace", "5",
                  "--jitter", "2.5", *db)
    assert done.exit_code == 0, done.output
    expected = {"priority": 7, "group": "images", "requires": "gpu", "timeout": 120.0,
                "isolation": "process", "misfire": "skip", "grace": 5.0, "jitter": 2.5}
    (listed,) = json.loads(invoke("list", "--json", *db).stdout)
    assert listed["options"] == expected
    shown = " ".join(invoke("show", "resize", *db).stdout.split())
    assert ("options priority=7 group=images requires=gpu timeout=120s isolation=process "
            "misfire=skip grace=5s jitter=2.5s") in shown
    assert "priority=7" in invoke("list", *db).stdout
    with Client(url, table=table) as client:
        info = client.info("resize")
        assert dict(info.options) == expected
    # Bad options are refused with the option named; nothing is written.
    assert_fails(invoke("schedule", "other", "--handler", "img", "--every", "30",
                        "--timeout", "-1", *db), 1, "timeout must be > 0")
    assert_fails(invoke("schedule", "other", "--handler", "img", "--every", "30",
                        "--misfire", "later", *db), 2, "--misfire")
    with Client(url, table=table) as client:
        assert [t.name for t in client.tasks()] == ["resize"]


def test_groups_shows_running_and_limit_and_sets_limits(migrated: tuple[str, str]) -> None:
    url, table = migrated
    db = ["--url", url, "--table", table]
    assert "no groups" in invoke("groups", *db).stdout
    for i in range(3):
        assert invoke("schedule", f"r-{i}", "--handler", "rep", "--every", "60",
                      "--group", "reports", *db).exit_code == 0
    out = invoke("groups", "--set", "reports=2", "--set", "mail=5", *db)
    assert out.exit_code == 0, out.output
    lines = {line.split()[0]: line.split() for line in out.stdout.splitlines()[2:]
             if line.strip()}
    assert lines["reports"][1:] == ["0", "/", "2", "3"]
    assert lines["mail"][1:] == ["0", "/", "5", "0"]
    as_json = json.loads(invoke("groups", "--json", "--remove", "mail", *db).stdout)
    assert [(g["name"], g["running"], g["limit"], g["tasks"]) for g in as_json] == [
        ("reports", 0, 2, 3)]
    assert_fails(invoke("groups", "--set", "reports=-1", *db), 1, "limit must be an integer")
    assert_fails(invoke("groups", "--set", "reports", *db), 2, "NAME=N")
