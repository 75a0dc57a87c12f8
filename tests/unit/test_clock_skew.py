"""Database clock skew between the servers nodes write through (a Galera cluster written
through several of its nodes): the estimate from the registry (:class:`ClockSkew`), the
registry's read of the other nodes' clocks and the pick's takeover margin on SQL Server and
Oracle (the recording driver of ``test_dialect_sql``). The real cluster is
``tests/topologies/test_galera_skew.py``."""

from __future__ import annotations

import logging
import time
import types
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from dbscheduler._engine.clock import Clock
from dbscheduler._engine.health import check
from dbscheduler._engine.nodes import SKEW_TOLD_AFTER, ClockSkew, NodeRegistry, takeover_margin
from dbscheduler._store.nodes import node_clocks
from tests.unit.test_dialect_sql import NAMES, NODE, NOW, Reply, Rig, _executed, _param_values, _rig

pytestmark = pytest.mark.filterwarnings("error::sqlalchemy.exc.SAWarning")

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
LEASE = timedelta(seconds=3)


@pytest.fixture(params=["mssql", "oracle"])
def rig(request: pytest.FixtureRequest) -> Iterator[Rig]:
    r = _rig(str(request.param))
    yield r
    r.engine.dispose()


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def reads(skew: ClockSkew, writes: list[float], ages: list[float], ahead: float,
          node: str = "b") -> None:
    """Reads of ``node``'s row: its writes at ``writes`` (true time, its clock right), each
    read ``age`` later on a clock ``ahead`` seconds fast."""
    for i, (w, age) in enumerate(zip(writes, ages, strict=True)):
        skew.observe([(node, at(w), at(w + age + ahead))], mono=float(i))


# -- the estimate --------------------------------------------------------------------------
def test_a_fast_clock_is_found_within_the_smallest_age_of_the_writes() -> None:
    skew = ClockSkew(bound=0.5)
    writes = list(range(SKEW_TOLD_AFTER + 1))
    ages = [0.9, 0.6, 0.3, 0.05, 0.7, 0.4, 0.8, 0.2, 0.5, 0.6, 0.3][:len(writes)]
    reads(skew, writes, ages, ahead=2.5)
    seconds, nodes = skew.ahead(SKEW_TOLD_AFTER)
    assert nodes == ["b"]
    assert seconds == pytest.approx(2.55)  # never below the true skew
    assert takeover_margin(seconds) == 3.0


def test_ages_alone_or_a_slow_clock_are_no_skew() -> None:
    skew = ClockSkew(bound=0.5)
    reads(skew, [0, 1, 2, 3, 4, 5], [0.9, 0.6, 0.3, 0.05, 0.7, 0.4], ahead=0.0, node="b")
    reads(skew, [0, 1, 2, 3, 4, 5], [0.9, 0.6, 0.3, 0.05, 0.7, 0.4], ahead=-2.5, node="c")
    assert skew.ahead() == (0.0, [])


def test_a_row_that_stops_advancing_gives_no_sample_and_a_gone_row_is_forgotten() -> None:
    skew = ClockSkew(bound=0.5)
    # A node stopped 20 s ago: its row only ages. Counted at the first read (it may be
    # alive), never after.
    skew.observe([("b", at(0), at(20))], mono=0.0)
    assert skew.ahead() == (20.0, ["b"])
    for i in range(1, 8):
        skew.observe([("b", at(0), at(20 + i))], mono=float(i))
    assert skew.ahead() == (0.0, [])
    reads(skew, [10 + i for i in range(SKEW_TOLD_AFTER + 1)], [0.1] * (SKEW_TOLD_AFTER + 1),
          ahead=3.0, node="c")
    assert skew.ahead(SKEW_TOLD_AFTER)[1] == ["c"]
    skew.observe([], mono=99.0)
    assert skew.ahead() == (0.0, [])


def test_the_warning_waits_for_several_writes_but_the_margin_does_not() -> None:
    skew = ClockSkew(bound=0.5)
    reads(skew, [0, 1, 2], [0.2, 0.1, 0.3], ahead=2.5)
    assert skew.ahead()[1] == ["b"]
    assert skew.ahead(SKEW_TOLD_AFTER) == (0.0, [])


# -- on SQL Server and Oracle ----------------------------------------------------------------
def test_the_clock_read_compares_the_other_live_nodes_on_the_database_clock(rig: Rig) -> None:
    rig.db.on(r"^SELECT \S+\.node_id, \S+\.last_seen", Reply(
        ["node_id", "last_seen", "db_now"], [("node-Zz1", NOW, NOW + timedelta(seconds=3))]))
    ((other, seen, now),) = node_clocks(rig.store, NODE, timedelta(seconds=30))
    assert other == "node-Zz1" and (now - seen).total_seconds() == 3.0
    assert seen.tzinfo is not None
    (read,) = rig.db.find(r"^SELECT \S+\.node_id, \S+\.last_seen")
    clock = "SYSUTCDATETIME()" if rig.backend == "mssql" else "SYS_EXTRACT_UTC"
    assert clock in read.sql.upper() and "last_seen >=" in read.sql
    assert NODE in _param_values(read) and -30.0 in _param_values(read)


def test_the_pick_takes_over_only_past_the_margin_and_due_rows_as_before(rig: Rig) -> None:
    # Without a margin, a held row is taken once its lease is over (the due condition's own
    # "locked_by IS NULL OR next_process_at <= now": never ahead of its lease's end).
    rig.store.pick(NODE, 4, LEASE, NAMES)
    plain = _executed(rig.db)
    held = sum(c.sql.count("locked_by IS NULL") for c in plain)
    assert not any(-3.0 in _param_values(c) for c in plain)

    rig.db.calls.clear()
    rig.store.takeover_margin = 3.0
    rig.store.pick(NODE, 4, LEASE, NAMES)
    picks = _executed(rig.db)
    assert sum(c.sql.count("locked_by IS NULL") for c in picks) > held, [c.sql for c in picks]
    assert any(-3.0 in _param_values(c) for c in picks)


# -- the registry ----------------------------------------------------------------------------
def test_the_registry_sets_the_margin_and_warns_once(rig: Rig,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    registry = NodeRegistry(rig.store, NODE, [], lambda: [])
    write = 0.0
    with caplog.at_level(logging.WARNING, logger="dbscheduler.nodes"):
        for i in range(SKEW_TOLD_AFTER + 4):
            write += 1.0
            rig.db.on(r"^SELECT \S+\.node_id, \S+\.last_seen", Reply(
                ["node_id", "last_seen", "db_now"],
                [("node-Zz1", NOW + timedelta(seconds=write),
                  NOW + timedelta(seconds=write + 2.6))]))
            registry.beat(0, 1.0, now=float(i * 10))
    assert rig.store.takeover_margin == 3.0
    told = [r.getMessage() for r in caplog.records if "clock skew" in r.getMessage()]
    assert len(told) == 1 and "node-Zz1" in told[0] and "2.6 s ahead" in told[0]
    assert registry.skew_reason() is not None


def test_health_names_the_skew_and_stays_ok(rig: Rig) -> None:
    registry = NodeRegistry(rig.store, NODE, [], lambda: [])
    for i in range(SKEW_TOLD_AFTER + 2):
        rig.db.on(r"^SELECT \S+\.node_id, \S+\.last_seen", Reply(
            ["node_id", "last_seen", "db_now"],
            [("node-Zz1", NOW + timedelta(seconds=i), NOW + timedelta(seconds=i + 2.6))]))
        registry.beat(0, 1.0, now=float(i * 10))
    now = time.monotonic()
    heartbeat = types.SimpleNamespace(last_beat_at=now, tracked=lambda: [], registry=registry)
    h = check(node_id=NODE, state="running", engine=sa.create_engine("sqlite://"),
              ping=lambda: None, clock=Clock(),
              poller=types.SimpleNamespace(last_poll_at=now),  # type: ignore[arg-type]
              heartbeat=heartbeat,  # type: ignore[arg-type]
              executor=types.SimpleNamespace(running=lambda: []),  # type: ignore[arg-type]
              poll_interval=timedelta(seconds=0.5), lease=LEASE)
    assert h.ok
    assert h.reason == ("database clock 2.6 s ahead of node(s) node-Zz1's: takeovers wait "
                        "3.0 s past a lease's end")
