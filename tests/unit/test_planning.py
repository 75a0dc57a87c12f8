"""plan_next: the earlier-of rule, per-occurrence retry budgets, overrides, overflow."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dbscheduler._engine.planning import Plan, plan_next
from dbscheduler.context import Status, TaskContext
from dbscheduler.failures import (
    MAX_RETRY_DELAY,
    ArithmeticBackoff,
    FailureSettings,
    GeometricBackoff,
    LinearBackoff,
    NoRetry,
)
from dbscheduler.schedules import Cron, Dynamic, FixedDelay, FixedRate, Schedule

UTC = timezone.utc
T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
SECOND = timedelta(seconds=1)
MAX_UTC = datetime.max.replace(tzinfo=UTC)


def plan(
    schedule: Schedule,
    on_failure: FailureSettings,
    status: Status,
    attempt: int,
    *,
    at: datetime = T0,
    took: timedelta = SECOND,
    ctx: TaskContext | None = None,
    override: datetime | None = None,
) -> Plan:
    return plan_next(schedule, on_failure, status=status, attempt=attempt, scheduled_at=at,
                     started_at=at, finished_at=at + took, ctx=ctx, next_at_override=override)


@pytest.mark.parametrize("status", ["success", "cancelled"])
def test_success_goes_to_the_regular_occurrence(status: Status) -> None:
    got = plan(Cron("*/5 * * * *"), LinearBackoff(10), status, attempt=3)
    assert got == Plan(T0 + timedelta(minutes=5), 0)
    assert got.next_at.tzinfo is UTC


@pytest.mark.parametrize("status", ["error", "lost"])
def test_no_retry_failure_goes_to_the_regular_occurrence(status: Status) -> None:
    assert plan(Cron("*/5 * * * *"), NoRetry(), status, attempt=1) == Plan(
        T0 + timedelta(minutes=5), 0
    )


@pytest.mark.parametrize("status", ["error", "lost"])
def test_retry_when_earlier_keeps_attempt(status: Status) -> None:
    got = plan(Cron("*/5 * * * *"), LinearBackoff(60), status, attempt=1)
    assert got == Plan(T0 + SECOND + timedelta(seconds=60), 1)


def test_earlier_of_retry_and_regular() -> None:
    every_5_min = Cron("*/5 * * * *")
    backoff = GeometricBackoff(60)  # 1, 2, 4, 8 minutes after the finish
    finish = T0 + SECOND
    assert plan(every_5_min, backoff, "error", 1) == Plan(finish + timedelta(minutes=1), 1)
    assert plan(every_5_min, backoff, "error", 2) == Plan(finish + timedelta(minutes=2), 2)
    assert plan(every_5_min, backoff, "error", 3) == Plan(finish + timedelta(minutes=4), 3)
    # 8 minutes would be after the next regular occurrence (12:05): that one wins.
    assert plan(every_5_min, backoff, "error", 4) == Plan(T0 + timedelta(minutes=5), 0)


def test_retry_equal_to_regular_is_the_regular_one() -> None:
    # FixedDelay(10) after a 1 s run: regular = finish + 10 s = retry time.
    assert plan(FixedDelay(10), LinearBackoff(10), "error", 1) == Plan(T0 + 11 * SECOND, 0)
    # A fixed rate shorter than the backoff: the regular occurrence comes first.
    assert plan(FixedRate(10), LinearBackoff(60), "error", 1) == Plan(T0 + 10 * SECOND, 0)


def test_each_occurrence_gets_a_fresh_budget() -> None:
    """Replays the engine: a pick adds 1 to `attempt`, the finish writes the plan."""
    hourly = Cron("0 * * * *")
    backoff = LinearBackoff(60, max_attempts=3)
    due, attempt = T0, 0
    seen: list[tuple[int, datetime, int]] = []
    for _ in range(7):  # every execution fails
        attempt += 1  # the pick
        got = plan(hourly, backoff, "error", attempt, at=due)
        seen.append((attempt, got.next_at, got.attempt))
        due, attempt = got.next_at, got.attempt
    h = timedelta(hours=1)
    assert seen == [
        (1, T0 + 61 * SECOND, 1),  # first try of 12:00 failed: retry
        (2, T0 + 122 * SECOND, 2),  # second try failed: retry
        (3, T0 + h, 0),  # third try failed: budget spent, next occurrence (13:00)
        (1, T0 + h + 61 * SECOND, 1),  # 13:00 has a fresh budget of 3
        (2, T0 + h + 122 * SECOND, 2),
        (3, T0 + 2 * h, 0),
        (1, T0 + 2 * h + 61 * SECOND, 1),
    ]


def test_success_after_retries_resets_attempt() -> None:
    got = plan(Cron("0 * * * *"), LinearBackoff(60, max_attempts=5), "success", 4)
    assert got == Plan(T0 + timedelta(hours=1), 0)


def test_lost_execution_counts_as_a_failed_attempt() -> None:
    backoff = ArithmeticBackoff(30, max_attempts=2)
    assert plan(Cron("0 * * * *"), backoff, "lost", 1) == Plan(T0 + 31 * SECOND, 1)
    assert plan(Cron("0 * * * *"), backoff, "lost", 2) == Plan(T0 + timedelta(hours=1), 0)


def test_next_run_sees_the_execution() -> None:
    seen: list[TaskContext | None] = []

    def decide(ctx: TaskContext | None) -> datetime:
        seen.append(ctx)
        return T0 + timedelta(days=1)

    ctx = TaskContext(name="t", node_id="n", attempt=1, reenqueue_attempt=0, total_attempt=1,
                      scheduled_at=T0, started_at=T0, created_at=T0, state=None)
    assert plan(Dynamic(decide), NoRetry(), "success", 1, ctx=ctx) == Plan(
        T0 + timedelta(days=1), 0
    )
    assert seen == [ctx]
    # FixedDelay counts from the finish, Cron and FixedRate from the start.
    long_run = timedelta(minutes=3)
    assert plan(FixedDelay(60), NoRetry(), "success", 1, took=long_run).next_at == (
        T0 + long_run + timedelta(seconds=60)
    )
    assert plan(FixedRate(60), NoRetry(), "success", 1, took=long_run).next_at == (
        T0 + timedelta(seconds=60)
    )


@pytest.mark.parametrize(
    ("status", "expected_attempt"),
    [("success", 0), ("cancelled", 0), ("error", 4), ("lost", 4)],
)
def test_override_wins_over_schedule_and_retry(status: Status, expected_attempt: int) -> None:
    def must_not_be_called(ctx: TaskContext | None) -> datetime:
        raise AssertionError("the schedule must not be consulted when next_at is given")

    override = datetime(2027, 6, 1, 8, 0, tzinfo=ZoneInfo("Europe/Berlin"))
    got = plan(Dynamic(must_not_be_called), LinearBackoff(1), status, 4, override=override)
    assert got == Plan(override, expected_attempt)
    assert got.next_at.tzinfo is UTC
    assert got.next_at == datetime(2027, 6, 1, 6, 0, tzinfo=UTC)


def test_override_in_the_past_is_kept() -> None:
    past = T0 - timedelta(days=1)
    assert plan(FixedRate(60), NoRetry(), "success", 1, override=past) == Plan(past, 0)


def test_naive_override_is_rejected() -> None:
    with pytest.raises(ValueError, match=r"^Result\.next_at must be timezone-aware"):
        plan(FixedRate(60), NoRetry(), "success", 1, override=datetime(2027, 1, 1))


def test_unknown_status_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown status 'ok'"):
        plan(FixedRate(60), NoRetry(), "ok", 1)  # type: ignore[arg-type]


def test_dynamic_errors_propagate() -> None:
    with pytest.raises(ValueError, match="naive"):
        plan(Dynamic(lambda ctx: datetime(2030, 1, 1)), NoRetry(), "success", 1)


def test_no_overflow_at_the_end_of_time() -> None:
    late = datetime(9999, 12, 31, 23, 0, tzinfo=UTC)
    huge = LinearBackoff(MAX_RETRY_DELAY)
    never = Dynamic(lambda ctx: MAX_UTC)
    # Retry would be past datetime.max: clamped, and not earlier than the regular time.
    assert plan(never, huge, "error", 1, at=late) == Plan(MAX_UTC, 0)
    assert plan(FixedDelay(0), GeometricBackoff(1), "error", 10**9, at=late) == Plan(
        late + SECOND, 0
    )
    assert plan(FixedRate(7200), huge, "error", 1, at=late) == Plan(MAX_UTC, 0)
    assert plan(Cron("0 0 1 1 *"), huge, "error", 1, at=late) == Plan(MAX_UTC, 0)
    # A retry that fits is still chosen.
    assert plan(never, LinearBackoff(60), "error", 1, at=late) == Plan(
        late + SECOND + timedelta(seconds=60), 1
    )


@given(
    regular_s=st.integers(0, 10**6),
    delay_s=st.integers(1, 10**6),
    max_attempts=st.none() | st.integers(1, 10),
    attempt=st.integers(1, 12),
    status=st.sampled_from(["success", "cancelled", "error", "lost"]),
)
def test_plan_properties(
    regular_s: int, delay_s: int, max_attempts: int | None, attempt: int, status: Status
) -> None:
    regular = T0 + SECOND + timedelta(seconds=regular_s)
    got = plan(FixedDelay(regular_s), LinearBackoff(delay_s, max_attempts=max_attempts),
               status, attempt)
    retry = T0 + SECOND + timedelta(seconds=delay_s)
    may_retry = status in ("error", "lost") and (max_attempts is None or attempt < max_attempts)
    if may_retry and retry < regular:
        assert got == Plan(retry, attempt)
    else:
        assert got == Plan(regular, 0)
    assert got.next_at <= regular  # never later than the schedule
