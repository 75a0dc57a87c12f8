"""An execution that ended stays excluded from this node's picks until its finish is written."""

from __future__ import annotations

import time

import pytest

from dbscheduler import FixedDelay, Scheduler, TaskContext
from dbscheduler._engine.finisher import Finisher
from dbscheduler._engine.heartbeat import Heartbeat
from tests.helpers import polled, running, wait_until


@pytest.fixture(params=["sqlite", "postgresql", "mysql"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_a_slow_hand_over_to_the_finisher_does_not_re_pick_the_row(
    migrated: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, table = migrated
    # No heartbeat reaches the database: the lease runs out while the task still works, so
    # the row is due again by the time the function returns (an outage, not a takeover).
    monkeypatch.setattr(Heartbeat, "beat", lambda self: None)
    # A slow hand-over from the worker to the finisher (a busy process, a GC pause).
    put = Finisher.put

    def slow_put(self: Finisher, ended: object) -> None:
        time.sleep(0.5)  # the slow hand-over itself: its length is the fault injected
        put(self, ended)  # type: ignore[arg-type]

    monkeypatch.setattr(Finisher, "put", slow_put)
    lost: list[str] = []
    runs: list[int] = []

    class Lost:
        def on_lost_execution(self, info: object) -> None:
            lost.append(repr(info))

    def work(ctx: TaskContext) -> None:
        runs.append(ctx.total_attempt)
        if len(runs) == 1:
            time.sleep(2.6)  # longer than the lease; ignores stop_requested

    # A lease of 2 s, not less: on a loaded machine the first start may come a second late.
    scheduler = Scheduler(url, table=table, lease=2, poll_interval=0.05)
    scheduler.add("slow", work, schedule=FixedDelay(3600))
    scheduler.add_listener(Lost())
    with running(scheduler):
        scheduler.trigger("slow")
        wait_until(lambda: scheduler.info("slow").last_finished_at is not None, timeout=10,
                   what="the first finish")
        polled(scheduler, 10)  # a re-pick of the row would have started by now
        info = scheduler.info("slow")
    assert lost == []
    assert runs == [1]
    assert info.last_status == "success" and info.total_attempt == 1
