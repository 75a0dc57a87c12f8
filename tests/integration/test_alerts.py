"""Lateness alerts in one process on every real database: what ``on_overdue`` and
``on_recovered`` receive, ``TaskInfo.overdue``, the counts, what is never alerted, and the
options' checks. Exactly-one-node-per-episode is ``tests/conformance/test_alerts.py``."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from dbscheduler import Client, FixedRate, Listener, Scheduler, TaskContext, TaskInfo
from tests.helpers import running, wait_until


class Alerts(Listener):
    def __init__(self) -> None:
        self.overdue: list[tuple[TaskInfo, timedelta]] = []
        self.recovered: list[TaskInfo] = []

    def on_overdue(self, info: TaskInfo, late_by: timedelta) -> None:
        self.overdue.append((info, late_by))

    def on_recovered(self, info: TaskInfo) -> None:
        self.recovered.append(info)


def test_a_dead_man_limit_alerts_once_and_recovers_once(migrated: tuple[str, str]) -> None:
    url, table = migrated
    s = Scheduler(url, table=table, poll_interval=0.1, overdue_check=0.2)
    alerts = Alerts()
    s.add_listener(alerts)
    failing = threading.Event()
    failing.set()

    def flaky(ctx: TaskContext) -> None:
        if failing.is_set():
            raise RuntimeError("down")

    s.add("flaky", flaky, schedule=FixedRate(0.2), alert_after=timedelta(seconds=1))
    # 5 s: a loaded machine may hold a 0.2 s task back for a second, which is no dead man.
    s.add("steady", lambda: None, schedule=FixedRate(0.2), alert_after=5)
    s.add("paused", lambda: None, schedule=FixedRate(0.2), alert_after=1)
    with running(s):
        s.pause("paused")
        wait_until(lambda: alerts.overdue, 10, "the dead-man alert")
        (info, late_by), = alerts.overdue
        # No status yet when a slow machine had not ended its first run a second after its
        # creation: no success within its limit all the same.
        assert info.name == "flaky" and info.last_status in ("error", None)
        assert info.overdue and info.alerted_at is not None
        assert info.alert_after == timedelta(seconds=1)
        assert info.last_success_at is None and late_by >= timedelta(seconds=1)
        assert s.info("flaky").overdue
        # Counted overdue whenever it is not running: a count taken during one of its retries
        # lists it as running instead.
        wait_until(lambda: s.client.counts().overdue == 1, 10, "flaky counted as overdue")
        failing.clear()
        wait_until(lambda: alerts.recovered, 10, "the recovery")
        (back,) = alerts.recovered
        assert back.name == "flaky" and back.last_status == "success"
        assert back.alerted_at is None and not back.overdue
        threading.Event().wait(0.4)  # paused for well over its limit now: two more checks
        assert [i.name for i, _ in alerts.overdue] == ["flaky"]  # paused: never late
        s.resume("paused")
        wait_until(lambda: s.info("paused").reenqueue_attempt >= 2
                   and len(alerts.recovered) == len(alerts.overdue), 10, "paused ran again")
        # Its limit counts from its creation (it never succeeded): a check between the resume
        # and its first success may find it late once; it recovers with that success.
        before = (len(alerts.overdue), len(alerts.recovered))
        threading.Event().wait(1.0)  # five more checks
        assert (len(alerts.overdue), len(alerts.recovered)) == before
    names = [i.name for i, _ in alerts.overdue]
    assert names in (["flaky"], ["flaky", "paused"]), names
    assert [i.name for i in alerts.recovered] == names, alerts.recovered


def test_an_unpicked_task_is_overdue_until_it_runs(migrated: tuple[str, str]) -> None:
    url, table = migrated
    gone = Scheduler(url, table=table, overdue_check=None)
    gone.add("orphan", lambda: None, schedule=FixedRate(3600))
    gone.sync()
    gone.reschedule("orphan", gone.client.db_now() - timedelta(seconds=3))
    s = Scheduler(url, table=table, poll_interval=0.1, overdue_after=1, overdue_check=0.2)
    alerts = Alerts()
    s.add_listener(alerts)
    ran = threading.Event()
    with running(s):
        wait_until(lambda: alerts.overdue, 10, "the overdue alert")
        (info, late_by), = alerts.overdue
        assert info.name == "orphan" and late_by >= timedelta(seconds=3)
        with Client(url, table=table, overdue_after=1) as client:
            assert [t.name for t in client.tasks() if t.overdue] == ["orphan"]
            assert client.counts().overdue == 1
        with Client(url, table=table, overdue_after=3600) as lenient:
            assert not lenient.info("orphan").overdue
        # A node that has it comes back: it runs, and the episode ends.
        s.handler("orphan")(lambda ctx: ran.set())
        assert ran.wait(10)
        wait_until(lambda: alerts.recovered, 10, "the recovery")
        assert [i.name for i in alerts.recovered] == ["orphan"]
    gone.engine.dispose()


def test_no_checks_without_overdue_check(migrated: tuple[str, str]) -> None:
    url, table = migrated
    s = Scheduler(url, table=table, poll_interval=0.1, overdue_check=None)
    alerts = Alerts()
    s.add_listener(alerts)
    s.add("never-ok", lambda: 1 / 0, schedule=FixedRate(0.1), alert_after=0.2)
    with running(s):
        wait_until(lambda: s.info("never-ok").total_attempt >= 5, 10, "runs")
        assert s.info("never-ok").overdue  # late, as every reader can see …
    assert alerts.overdue == []             # … but this node was told not to check


@pytest.mark.parametrize("backend", ["sqlite"])
def test_bad_options_are_refused_naming_them(migrated: tuple[str, str]) -> None:
    url, table = migrated
    for kwargs, message in (
        ({"history": -1}, "history must be > 0"),
        ({"history_per_task": 0}, "history_per_task must be an integer >= 1 or None"),
        ({"overdue_after": "soon"}, "overdue_after must be a timedelta or a number"),
        ({"overdue_check": 0}, "overdue_check must be > 0"),
    ):
        with pytest.raises(ValueError, match=message):
            Scheduler(url, table=table, **kwargs)  # type: ignore[arg-type]
    s = Scheduler(url, table=table)
    with pytest.raises(ValueError, match="task 'x': alert_after must be > 0"):
        s.add("x", lambda: None, schedule=FixedRate(1), alert_after=timedelta(0))
    with pytest.raises(ValueError, match="task 'y': alert_after must be a timedelta"):
        s.client.schedule("y", "h", FixedRate(60), alert_after="1h")
    with pytest.raises(ValueError, match="task 'z': alert_after must be at most 3650 days"):
        s.add("z", lambda: None, schedule=FixedRate(1), alert_after=timedelta(days=4000))
    assert s.tasks() == []  # nothing was written
    s.engine.dispose()


def test_alert_after_of_a_runtime_task_and_a_changed_declaration(
    migrated: tuple[str, str]
) -> None:
    url, table = migrated
    s = Scheduler(url, table=table)
    s.client.schedule("rt", "h", FixedRate(60), alert_after=timedelta(minutes=5))
    assert s.info("rt").alert_after == timedelta(minutes=5)
    s.add("declared", lambda: None, schedule=FixedRate(60), alert_after=60)
    s.sync()
    assert s.info("declared").alert_after == timedelta(minutes=1)
    again = Scheduler(url, table=table)  # the next deploy changes it
    again.add("declared", lambda: None, schedule=FixedRate(60), alert_after=120)
    again.sync()
    assert s.info("declared").alert_after == timedelta(minutes=2)
    third = Scheduler(url, table=table)
    third.add("declared", lambda: None, schedule=FixedRate(60))
    third.sync()
    assert s.info("declared").alert_after is None
    for x in (s, again, third):
        x.engine.dispose()
