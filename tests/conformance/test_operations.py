"""The operations API (list, info, trigger, pause, resume, reschedule, cancel, delete) on
SQLite, PostgreSQL and MariaDB.

Operations are called on a Scheduler that is never started (as from another process), while a
real node may be running the tasks in the same process.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone

import pytest

from dbscheduler import (
    Scheduler,
    SchemaMissing,
    TaskInfo,
    TaskNotFound,
    TaskRunning,
)
from dbscheduler._engine.history import PRUNE_TASK
from tests.harness.inprocess import Node, db_now, seed
from tests.helpers import polled, settled, wait_until


@pytest.fixture
def ops(migrated: tuple[str, str]) -> Iterator[Scheduler]:
    """A Scheduler that is never started: the operations as another process would use them."""
    url, table = migrated
    scheduler = Scheduler(url, table=table)
    yield scheduler
    scheduler.engine.dispose()


@pytest.fixture
def node_factory(migrated: tuple[str, str]) -> Iterator[Callable[..., Node]]:
    url, table = migrated
    nodes: list[Node] = []

    def make(**kwargs: float) -> Node:
        node = Node(url, table, **kwargs)
        nodes.append(node)
        node.scheduler.start()
        return node

    yield make
    for node in nodes:
        node.scheduler.shutdown(timeout=5)


@pytest.fixture
def node(node_factory: Callable[..., Node]) -> Node:
    return node_factory()


# -- reading -----------------------------------------------------------------------------


def test_tasks_and_info_work_on_a_never_started_scheduler(
    migrated: tuple[str, str], ops: Scheduler
) -> None:
    url, table = migrated
    assert ops.tasks() == []
    before = db_now(url, table)
    seed(url, table, "b-task", "a-task")
    after = db_now(url, table)

    infos = ops.tasks()
    assert [i.name for i in infos] == ["a-task", "b-task"]
    info = ops.info("a-task")
    assert info == infos[0]
    assert isinstance(info, TaskInfo)
    assert info.schedule == "fixed-rate 3600s"
    assert info.state is None  # seeded rows never ran
    assert not info.running and info.locked_by is None and not info.paused
    assert (info.attempt, info.total_attempt, info.reenqueue_attempt) == (0, 0, 0)
    assert info.last_status is None and info.last_started_at is None
    for stamp in (info.created_at, info.next_process_at):
        assert stamp.utcoffset() == timedelta(0)
    assert before - timedelta(seconds=1) <= info.created_at <= after + timedelta(seconds=1)
    assert info.next_process_at - info.created_at == timedelta(hours=1)

    data = json.loads(json.dumps(info.to_dict()))
    assert data["name"] == "a-task" and data["running"] is False
    assert datetime.fromisoformat(data["next_process_at"]) == info.next_process_at
    assert data["next_process_at"].endswith("+00:00")


def test_unknown_name_raises_task_not_found_for_every_operation(
    migrated: tuple[str, str], ops: Scheduler
) -> None:
    url, table = migrated
    seed(url, table, "present")
    before = ops.info("present")
    at = datetime.now(timezone.utc) + timedelta(minutes=5)
    calls: list[Callable[[], object]] = [
        lambda: ops.trigger("absent"),
        lambda: ops.reschedule("absent", at),
        lambda: ops.pause("absent"),
        lambda: ops.resume("absent"),
        lambda: ops.cancel("absent"),
        lambda: ops.delete("absent"),
        lambda: ops.delete("absent", force=True),
        lambda: ops.info("absent"),
    ]
    for call in calls:
        with pytest.raises(TaskNotFound, match="'absent'"):
            call()
    assert ops.tasks() == [before]


def test_reschedule_rejects_a_naive_datetime_before_writing(
    migrated: tuple[str, str], ops: Scheduler
) -> None:
    url, table = migrated
    seed(url, table, "job")
    before = ops.info("job")
    with pytest.raises(ValueError, match="naive"):
        ops.reschedule("job", datetime(2030, 1, 1, 12, 0))
    with pytest.raises(ValueError):
        ops.reschedule("job", "2030-01-01T12:00:00Z")  # type: ignore[arg-type]
    assert ops.info("job") == before


# -- changing rows -----------------------------------------------------------------------


def test_trigger_makes_the_task_due_now_on_the_database_clock(
    migrated: tuple[str, str], ops: Scheduler
) -> None:
    url, table = migrated
    seed(url, table, "job")
    assert ops.info("job").next_process_at > db_now(url, table) + timedelta(minutes=59)
    before = db_now(url, table)
    ops.trigger("job")
    after = db_now(url, table)
    info = ops.info("job")
    assert before <= info.next_process_at <= after
    assert info.attempt == 0 and not info.running


def test_reschedule_stores_the_instant_given_in_any_offset(
    migrated: tuple[str, str], ops: Scheduler
) -> None:
    url, table = migrated
    seed(url, table, "job", "other")
    other = ops.info("other")
    at = datetime(2031, 6, 1, 14, 30, 15, 250000, tzinfo=timezone(timedelta(hours=2)))
    ops.reschedule("job", at)
    info = ops.info("job")
    assert info.next_process_at == at
    assert info.next_process_at == datetime(2031, 6, 1, 12, 30, 15, 250000, tzinfo=timezone.utc)
    assert info.next_process_at.utcoffset() == timedelta(0)
    assert ops.info("other") == other  # only the named row changed


def test_pause_and_resume_flip_the_flag_and_nothing_else(
    migrated: tuple[str, str], ops: Scheduler
) -> None:
    url, table = migrated
    seed(url, table, "job")
    before = ops.info("job")
    ops.pause("job")
    paused = ops.info("job")
    assert paused.paused
    assert paused.next_process_at == before.next_process_at
    ops.pause("job")  # idempotent
    assert ops.info("job").paused
    ops.resume("job")
    assert ops.info("job") == before


def test_cancel_of_an_idle_task_returns_false_and_changes_nothing(
    migrated: tuple[str, str], ops: Scheduler
) -> None:
    url, table = migrated
    seed(url, table, "job")
    before = ops.info("job")
    assert ops.cancel("job") is False
    after = ops.info("job")
    assert after == before and not after.stop_requested


def test_delete_of_an_idle_task_removes_only_its_row(
    migrated: tuple[str, str], ops: Scheduler
) -> None:
    url, table = migrated
    seed(url, table, "job", "keep")
    ops.delete("job")
    assert [i.name for i in ops.tasks()] == ["keep"]
    with pytest.raises(TaskNotFound):
        ops.info("job")


# -- with a running node -----------------------------------------------------------------


def test_a_paused_task_is_not_picked_even_when_due_and_runs_once_resumed(
    node: Node, ops: Scheduler
) -> None:
    ops.pause("quick")
    ops.trigger("quick")  # due now, but paused
    polled(node.scheduler)  # what the node would pick, it has picked by now
    assert node.quick_runs == []
    assert ops.info("quick").total_attempt == 0
    ops.resume("quick")
    wait_until(lambda: node.quick_runs, 60, "the resumed task to run")
    wait_until(lambda: ops.info("quick").last_status == "success", 60, "its finish")


def test_trigger_wakes_a_running_node_at_once(node_factory: Callable[..., Node]) -> None:
    # The safety-net poll is an hour away: only the wake-up can explain a start at all.
    node = node_factory(poll=3600.0)
    settled(node.scheduler)  # the poller is now asleep until its next poll
    node.scheduler.trigger("quick")
    wait_until(lambda: node.quick_runs, 60, "the triggered task to start before the next poll")


def test_trigger_from_another_scheduler_reaches_running_nodes(
    backend: str, node_factory: Callable[..., Node], ops: Scheduler
) -> None:
    # PostgreSQL wakes other processes at once (LISTEN/NOTIFY): the poll is an hour away
    # there, so only the NOTIFY can explain a start. Elsewhere the node sees it at its next
    # poll.
    node = node_factory(poll=3600.0 if backend == "postgresql" else 0.5)
    settled(node.scheduler)  # the node's LISTEN connection is up and its poller asleep
    ops.trigger("quick")
    wait_until(lambda: node.quick_runs, 60, "the node to see the trigger")


def test_operations_that_move_the_due_time_are_refused_while_it_runs(
    node: Node, ops: Scheduler
) -> None:
    node.start_long()
    info = ops.info("long")
    assert info.running and info.locked_by == node.node_id
    with pytest.raises(TaskRunning, match=node.node_id):
        ops.trigger("long")
    with pytest.raises(TaskRunning):
        ops.reschedule("long", datetime.now(timezone.utc) + timedelta(hours=2))
    # Pause is allowed while it runs: the execution goes on, the next pick is prevented.
    ops.pause("long")
    assert ops.info("long").running and ops.info("long").paused
    ops.resume("long")


def test_cancel_of_a_running_task_sets_stop_requested_and_records_cancelled(
    node: Node, ops: Scheduler
) -> None:
    node.start_long()
    assert ops.cancel("long") is True
    assert ops.info("long").stop_requested
    # Seen by the node's heartbeat (every lease / 3 = 2 s), not by the same object.
    # The heartbeat brings it, nothing else does: a bound of many heartbeats still tells.
    assert node.long_saw_stop.wait(30), "ctx.stop_requested was never set"
    wait_until(lambda: not ops.info("long").running, 60,
               "the cancelled execution to finish")
    info = ops.info("long")
    assert info.last_status == "cancelled"
    assert info.locked_by is None and not info.stop_requested
    assert info.total_attempt == 1
    # A cancel of the now idle task says so and changes nothing.
    assert ops.cancel("long") is False
    assert ops.info("long") == info


def test_delete_of_a_running_task_is_refused_unless_forced(
    migrated: tuple[str, str], node: Node, ops: Scheduler
) -> None:
    node.start_long()
    with pytest.raises(TaskRunning, match=f"running on node '{node.node_id}'.*force=True"):
        ops.delete("long")
    info = ops.info("long")
    assert info.running and info.locked_by == node.node_id
    ops.delete("long", force=True)
    with pytest.raises(TaskNotFound):
        ops.info("long")
    # The node learns at its next heartbeat that the row is gone and asks the task to stop;
    # its fenced finish must not bring the row back.
    assert node.long_saw_stop.wait(30)  # longer than the task waits: never set, it fails
    node.scheduler.shutdown(timeout=5)
    assert [i.name for i in ops.tasks()] == [PRUNE_TASK, "quick"]


# -- schema ------------------------------------------------------------------------------


def test_missing_table_raises_schema_missing_naming_dbscheduler_migrate(
    backend: str, db_url: str, table_name: str
) -> None:
    scheduler = Scheduler(db_url, table=table_name)
    try:
        if backend == "sqlite":
            # The embedded default creates its table on first use: zero set-up.
            assert scheduler.tasks() == []
            return
        at = datetime.now(timezone.utc)
        calls: list[Callable[[], object]] = [
            scheduler.tasks,
            lambda: scheduler.info("x"),
            lambda: scheduler.trigger("x"),
            lambda: scheduler.reschedule("x", at),
            lambda: scheduler.pause("x"),
            lambda: scheduler.resume("x"),
            lambda: scheduler.cancel("x"),
            lambda: scheduler.delete("x"),
        ]
        for call in calls:
            with pytest.raises(SchemaMissing, match="dbscheduler migrate") as raised:
                call()
            assert table_name in str(raised.value)
    finally:
        scheduler.engine.dispose()
