"""A node on a server that refuses writes says so in one line, waits for it like a server that is
down, and is not ready in ``health()``; a changed server (failover, restart) is logged once."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest
import sqlalchemy as sa

from dbscheduler import DatabaseUnreachable, FixedRate, Scheduler
from dbscheduler.dialects.pg_sessions import ServerWatch, _Server
from dbscheduler.migrate import upgrade
from tests.conftest import backend_url
from tests.databases import drop_table, unique_table

READ_ONLY = {
    "postgresql": "?options=-c%20default_transaction_read_only%3Don",
    "mysql": "?init_command=SET%20SESSION%20TRANSACTION%20READ%20ONLY",
}


@pytest.fixture(params=sorted(READ_ONLY))
def read_only_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """``(url, table)``: sessions of this URL are read-only, as on a standby or a replica."""
    url = backend_url(request.param, tmp_path)
    table = unique_table()
    engine = sa.create_engine(url)
    upgrade(engine, table)
    engine.dispose()
    yield url + READ_ONLY[request.param], table
    drop_table(url, table)


def test_a_read_only_server_is_said_in_one_line_and_not_ready(
    read_only_url: tuple[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    url, table = read_only_url
    caplog.set_level(logging.INFO, logger="dbscheduler")
    node = Scheduler(url, table=table, lease=3)
    node.add("a", lambda ctx: None, schedule=FixedRate(60))
    with pytest.raises(DatabaseUnreachable) as raised:
        node.start(wait=0.5)
    assert raised.value.kind == "read-only"
    message = str(raised.value)
    assert "read-only" in message
    assert "\n" not in message and "UPDATE" not in message and "INSERT" not in message
    if node.engine.dialect.name == "postgresql":
        assert "target_session_attrs" in message
        health = node.health()
        assert not health.ok and health.db_reachable
        assert health.reason is not None and "refuses writes" in health.reason
        said = [r for r in caplog.records if r.name == "dbscheduler.database"]
        assert len(said) == 1, [r.getMessage() for r in said]
    for record in caplog.records:  # one line each, no statement text
        assert "\n" not in record.getMessage() and "[SQL" not in record.getMessage()
    node.engine.dispose()


def test_a_changed_server_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="dbscheduler")
    watch = ServerWatch({})
    first = _Server("10.0.0.1", 5432, datetime(2026, 1, 1, tzinfo=timezone.utc))
    second = _Server("10.0.0.2", 5432, datetime(2026, 1, 2, tzinfo=timezone.utc))
    for server in (first, first, second, second, second):
        watch._learned(server, False, 5432, False, False)
    changed = [r.getMessage() for r in caplog.records if "server changed" in r.getMessage()]
    assert changed == ["the database server changed: now 10.0.0.2:5432, up since 2026-01-02 "
                       "00:00:00, was 10.0.0.1:5432, up since 2026-01-01 00:00:00 (a failover "
                       "or a restart)"]
