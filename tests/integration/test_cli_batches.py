"""``dbscheduler push``, ``drop`` and ``batches`` on SQLite, PostgreSQL and MariaDB: what they
print, the same JSON as :meth:`Client.batches`, and exit codes for bad input."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest
from click.testing import CliRunner

from dbscheduler import Client
from dbscheduler.cli import cli

pytestmark = pytest.mark.parametrize("backend", ["sqlite", "postgresql", "mysql"])


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def test_push_batches_and_drop(migrated: tuple[str, str]) -> None:
    url, table = migrated
    where = ("--url", url, "--table", table)
    code, out = run("push", "ann", '{"event": "comment"}', "--handler", "digest",
                    "--ontime", "2031-01-02T03:04:05Z", *where)
    assert code == 0, out
    assert out.startswith("pushed to digest/ann: 1 item(s) pending, due 2031-01-02 03:04:05")
    code, out = run("push", "ann", "2", "--handler", "digest", "--update", "once",
                    "--ontime", "1", *where)
    assert (code, out.split(",")[0]) == (0, "pushed to digest/ann: 2 item(s) pending")
    assert "due 2031-01-02 03:04:05" in out, "once: the batch keeps its time"
    code, out = run("push", "--handler", "digest", *where, "--", "-alone", "[1, 2]")
    assert code == 0, out
    code, out = run("batches", *where)
    assert code == 0 and "digest" in out and "ann" in out and "-alone" in out, out
    code, out = run("batches", "--json", *where)
    with Client(url, table=table) as client:
        assert json.loads(out) == [b.to_dict() for b in client.batches()]
        (ann,) = [b for b in client.batches("digest") if b.key == "ann"]
        assert (ann.items, ann.due_at) == (2, datetime(2031, 1, 2, 3, 4, 5, tzinfo=timezone.utc))
    assert run("drop", "ann", "--handler", "digest", *where) == (
        0, "dropped 2 item(s) of digest/ann\n")
    code, out = run("batches", "--handler", "digest", "--json", *where)
    assert [b["key"] for b in json.loads(out)] == ["-alone"]


def test_bad_input_exits_with_a_message_and_writes_nothing(migrated: tuple[str, str]) -> None:
    url, table = migrated
    where = ("--url", url, "--table", table)
    for args, code, message in [
        (("push", "k", "{oops", "--handler", "d"), 2, "not JSON"),
        (("push", "k", "1", "--handler", "d", "--ontime", "soon"), 2, "Unix seconds"),
        (("push", "k", "1", "--handler", "d", "--ontime", "2031-01-02T03:04:05"), 2,
         "no UTC offset"),
        (("push", "k", "1", "--handler", "d", "--update", "never"), 2, "'never'"),
        (("push", "k", "1"), 2, "--handler"),
        (("push", "k", "1", "--handler", "a/b"), 1, "may not contain '/'"),
        (("push", " k", "1", "--handler", "d"), 1, "white space"),
        (("drop", "k", "--handler", "a/b"), 1, "may not contain '/'"),
    ]:
        result, out = run(*args, *where)
        assert result == code, (args, out)
        assert message in out, (args, out)
        assert "Traceback" not in out
    assert run("batches", "--json", *where) == (0, "[]\n")
