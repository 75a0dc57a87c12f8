"""Every line the engine logs carries the node, task and token fields, whichever thread wrote
it; per-execution lines are at DEBUG; a task's own lines can carry the fields too."""

from __future__ import annotations

import logging
import re
import threading

import pytest

from dbscheduler import FixedDelay, Scheduler, TaskContext
from dbscheduler.logfields import RECORD_FIELDS, current
from tests.helpers import running, wait_until

LINE = re.compile(r"^\[node=(\S+) task=('[^']*'|-) token=(\d+|-)\] ")


def test_every_engine_line_carries_node_task_and_token(
    migrated: tuple[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    db_url, table_name = migrated
    caplog.set_level(logging.DEBUG, logger="dbscheduler")
    seen_inside: list[dict[str, object]] = []
    failed = threading.Event()

    def good(ctx: TaskContext) -> None:
        seen_inside.append(current())
        logging.getLogger("app").info("own line %s", current())

    def bad() -> None:
        try:
            raise RuntimeError("boom 100%")
        finally:
            failed.set()

    scheduler = Scheduler(db_url, table=table_name, node_id="node-7", poll_interval=0.2)
    scheduler.add("good", good, schedule=FixedDelay(3600))
    scheduler.add("bad %d", bad, schedule=FixedDelay(3600))
    with running(scheduler):
        scheduler.trigger("good")
        scheduler.trigger("bad %d")
        assert failed.wait(10)
        wait_until(lambda: scheduler.info("bad %d").last_status == "error"
                   and scheduler.info("good").last_status == "success",
                   timeout=10, what="both finishes written")
    records = [r for r in caplog.records if r.name.startswith("dbscheduler")]
    assert records
    for record in records:
        message = record.getMessage()
        match = LINE.match(message)
        assert match, message
        assert match.group(1) == "node-7", message
        for field in RECORD_FIELDS:
            assert hasattr(record, field), (field, message)
    by_message = {r.getMessage(): r for r in records}
    failure = next(m for m in by_message if "failed: RuntimeError: boom 100%" in m)
    assert re.match(r"^\[node=node-7 task='bad %d' token=\d+\] ", failure)
    assert by_message[failure].levelno == logging.ERROR
    assert by_message[failure].dbscheduler_task == "bad %d"  # type: ignore[attr-defined]
    started = [r for r in records if "] started (attempt" in r.getMessage()]
    finished = [r for r in records if "] finished: " in r.getMessage()]
    assert {r.levelno for r in started + finished} == {logging.DEBUG}
    assert {r.dbscheduler_task for r in started} == {"good", "bad %d"}  # type: ignore[attr-defined]
    # A poll is about no task: its lines say so with '-'.
    assert any("task=- token=-]" in r.getMessage() for r in records)
    # Inside the function the fields are the execution's.
    assert len(seen_inside) == 1
    assert seen_inside[0]["node"] == "node-7" and seen_inside[0]["task"] == "good"
    assert isinstance(seen_inside[0]["token"], int)
    assert current() == {"node": None, "task": None, "token": None}
