"""Batch handlers under :class:`~dbscheduler.testing.TestScheduler`: a user's test of a
digest moves the database clock and sees the merged delivery, the window and the retries."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from dbscheduler import LinearBackoff, Scheduler, TaskContext
from dbscheduler.testing import TestScheduler

START = datetime(2026, 1, 1, tzinfo=timezone.utc)


def test_a_digest_under_the_testing_harness(tmp_path: Path) -> None:
    scheduler = Scheduler(f"sqlite:///{tmp_path}/t.sqlite3")
    sent: list[tuple[str, int, list[Any]]] = []

    @scheduler.batch_handler("digest", on_failure=LinearBackoff(30))
    def digest(ctx: TaskContext, items: list[Any]) -> None:
        sent.append((ctx.name, ctx.attempt, items))
        if len(sent) == 1:
            raise ConnectionError("smtp down")

    with TestScheduler(scheduler, now=START) as ts:
        window = START + timedelta(minutes=10)
        for text in ("a", "b", "c"):
            scheduler.push("ann", text, handler="digest", ontime=window, update="once")
        assert ts.advance(timedelta(minutes=9)) == []
        runs = ts.advance(timedelta(minutes=1))
        assert [(r.status, r.scheduled_at) for r in runs] == [("error", window)]
        runs = ts.advance(timedelta(seconds=30))
        assert [(r.status, r.attempt) for r in runs] == [("success", 2)]
        assert sent == [("digest/ann", 1, ["a", "b", "c"]), ("digest/ann", 2, ["a", "b", "c"])]
        assert ts.tasks() == [] and scheduler.batches() == []
