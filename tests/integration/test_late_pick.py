"""A pick answered after its leases could have expired is given back as it found the rows:
a lost execution among them is still recorded as lost, not run over as if nothing was lost.

Found by a run under load: the node gave such rows back as plain due rows, so the next pick
ran the orphaned task as a fresh execution and the lost one was never recorded.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from dbscheduler import FixedDelay, Listener, Scheduler, TaskInfo
from dbscheduler._store import Registration, Store
from tests.helpers import running, wait_until

pytestmark = pytest.mark.parametrize("backend", ["sqlite", "postgresql", "mysql"])

LEASE = 1.5
HOUR = FixedDelay(3600)


def test_a_late_pick_gives_a_lost_execution_back_to_be_recorded(
    migrated: tuple[str, str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, table = migrated
    admin = sa.create_engine(url, poolclass=sa.pool.NullPool)
    store = Store(admin, table)
    # An orphan: held by a node that vanished, its lease long expired.
    store.register([Registration("orphan", HOUR.describe(), HOUR.first_run)])
    with admin.begin() as conn:
        conn.execute(sa.text(
            f"UPDATE {table} SET locked_by = 'ghost', attempt = 1, total_attempt = 1, "
            "next_process_at = :past WHERE queue_name = 'orphan'"),
            {"past": store.db_now() - timedelta(minutes=5)})
    admin.dispose()

    # The first pick answers only after its leases ran out (a loaded machine, a slow
    # network): the node must give its rows back and run none of them.
    real_pick = Store.pick
    late: list[int] = []

    def late_pick(self: Store, *args: Any, **kwargs: Any) -> Any:
        picked = real_pick(self, *args, **kwargs)
        if not late and picked.rows:
            late.append(len(picked.rows))
            time.sleep(LEASE + 0.2)
        return picked

    monkeypatch.setattr(Store, "pick", late_pick)
    ran: list[int] = []
    lost: list[TaskInfo] = []
    recorded = threading.Event()

    class Lost(Listener):
        def on_lost_execution(self, info: TaskInfo) -> None:
            lost.append(info)
            recorded.set()

    s = Scheduler(url, table=table, node_id="late", lease=LEASE, poll_interval=0.1)
    s.add("orphan", lambda ctx: ran.append(ctx.total_attempt), schedule=HOUR)
    s.add_listener(Lost())

    with running(s):
        wait_until(recorded.is_set, 30, "the lost execution recorded")
        wait_until(lambda: not s.info("orphan").running, 30, "the orphan put back")
        info = s.info("orphan")
        runs = s.runs("orphan")
    assert late == [1], "the first pick took the orphan, late"
    # Recorded once, as the ghost's, by the ghost's own token (1), not the late pick's (2):
    # a finish of the ghost's that still came in is judged by that run row. The task did not
    # run (no retry: due again in an hour).
    assert [(i.name, i.locked_by, i.total_attempt) for i in lost] == [("orphan", "ghost", 1)]
    assert [(r.status, r.node_id, r.token) for r in runs] == [("lost", "ghost", 1)]
    assert info.last_status == "lost" and ran == []
