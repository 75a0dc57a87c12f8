"""A stored state that is not JSON fails only its own execution; the rest of the pick runs."""

from __future__ import annotations

import threading
from collections import Counter

import pytest
import sqlalchemy as sa

from dbscheduler import FixedRate, Scheduler, TaskContext
from dbscheduler._store import Registration, Store
from dbscheduler.table import make_table
from tests.helpers import running, wait_until

PERIOD = 0.5
RUN_FOR = 3.2
POISONS = {
    "not-json": "{this is not json",
    # Valid JSON, but json.loads gives up with a RecursionError (and it fits a MySQL TEXT).
    "too-deep": "[" * 30_000 + "]" * 30_000,
}


@pytest.fixture(params=["sqlite", "postgresql", "mysql"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.mark.parametrize("poison", sorted(POISONS))
def test_a_row_whose_state_cannot_be_decoded_fails_alone(
    migrated: tuple[str, str], poison: str
) -> None:
    url, table = migrated
    schedule = FixedRate(PERIOD)
    names = ["innocent-1", "innocent-2", "poisoned"]
    engine = sa.create_engine(url)
    try:
        # All three rows due at the same moment: one pick holds them together.
        Store(engine, table).register(
            [Registration(n, schedule.describe(), lambda now: now) for n in names]
        )
        t = make_table(table)
        with engine.begin() as conn:
            conn.execute(sa.update(t).where(t.c.queue_name == "poisoned")
                         .values(payload=POISONS[poison]))
    finally:
        engine.dispose()

    runs: Counter[str] = Counter()
    lock = threading.Lock()

    def work(ctx: TaskContext) -> None:
        with lock:
            runs[ctx.name] += 1

    scheduler = Scheduler(url, table=table, lease=3, poll_interval=0.2)
    for name in names:
        scheduler.add(name, work, schedule=schedule)
    expected = int(RUN_FOR / PERIOD)  # 6 occurrences; the first is due at once

    def innocents_ran() -> bool:
        with lock:
            return min(runs["innocent-1"], runs["innocent-2"]) >= expected - 1

    with running(scheduler):
        # As many occurrences as the slowest machine takes: the poisoned row is picked with
        # them every period, and must never hold them up.
        wait_until(innocents_ran, 120, f"the innocent rows to run {expected - 1} times")
    # After the shutdown: while it runs, the row is picked again every period.
    info = scheduler.info("poisoned")

    assert runs["innocent-1"] >= expected - 1 and runs["innocent-2"] >= expected - 1, runs
    assert runs["poisoned"] == 0
    assert info.last_status == "error"
    assert info.last_error is not None and "stored state cannot be decoded" in info.last_error
    assert ("JSONDecodeError" if poison == "not-json" else "RecursionError") in info.last_error
    # Not left leased, and the stored text is untouched, visible as it is.
    assert info.locked_by is None
    assert info.state is None and info.state_error is not None
    assert info.raw_state == POISONS[poison]
    listed = {i.name: i for i in scheduler.tasks()}
    assert listed["poisoned"].state_error == info.state_error
    assert listed["innocent-1"].state_error is None and listed["innocent-1"].raw_state is None
