"""Failure settings: retry delays per attempt, budgets, caps, validation."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dbscheduler.failures import (
    MAX_RETRY_DELAY,
    ArithmeticBackoff,
    FailureSettings,
    GeometricBackoff,
    LinearBackoff,
    NoRetry,
)

D = timedelta(seconds=10)


def delays(policy: FailureSettings, attempts: range) -> list[timedelta | None]:
    return [policy.retry_delay(n) for n in attempts]


def test_no_retry() -> None:
    assert delays(NoRetry(), range(0, 5)) == [None] * 5
    assert NoRetry() == NoRetry()


def test_sequences() -> None:
    assert delays(LinearBackoff(D), range(1, 5)) == [D, D, D, D]
    assert delays(ArithmeticBackoff(D), range(1, 5)) == [D, 3 * D, 5 * D, 7 * D]
    assert delays(GeometricBackoff(D), range(1, 6)) == [D, 2 * D, 4 * D, 8 * D, 16 * D]


def test_geometric_max_delay_caps() -> None:
    policy = GeometricBackoff(D, max_delay=timedelta(seconds=45))
    assert delays(policy, range(1, 6)) == [D, 2 * D, 4 * D, 4.5 * D, 4.5 * D]
    assert GeometricBackoff(D, max_delay=D).retry_delay(30) == D


@pytest.mark.parametrize(
    "policy",
    [
        LinearBackoff(D, max_attempts=3),
        ArithmeticBackoff(D, max_attempts=3),
        GeometricBackoff(D, max_attempts=3),
    ],
    ids=lambda p: type(p).__name__,
)
def test_max_attempts_counts_the_first_try(policy: FailureSettings) -> None:
    # max_attempts=3: the first try and two retries; the third failure gives up.
    got = delays(policy, range(1, 6))
    assert got[0] is not None and got[1] is not None
    assert got[2:] == [None, None, None]


@pytest.mark.parametrize("cls", [LinearBackoff, ArithmeticBackoff, GeometricBackoff])
def test_max_attempts_one_never_retries(cls: type[LinearBackoff]) -> None:
    assert delays(cls(D, max_attempts=1), range(1, 4)) == [None, None, None]


def test_attempt_below_one_reads_as_one() -> None:
    assert ArithmeticBackoff(D).retry_delay(0) == D
    assert GeometricBackoff(D).retry_delay(-3) == D
    assert LinearBackoff(D, max_attempts=2).retry_delay(0) == D


@pytest.mark.parametrize("n", [10_000, 10**9, 10**18, 2**200])
def test_no_overflow_at_huge_attempts(n: int) -> None:
    start = time.perf_counter()
    assert LinearBackoff(D).retry_delay(n) == D
    expected = D * (2 * n - 1) if n == 10_000 else MAX_RETRY_DELAY  # 55.5 hours at 10,000
    assert ArithmeticBackoff(D).retry_delay(n) == expected
    assert GeometricBackoff(D).retry_delay(n) == MAX_RETRY_DELAY
    assert GeometricBackoff(D, max_delay=timedelta(hours=1)).retry_delay(n) == timedelta(hours=1)
    assert GeometricBackoff(timedelta(microseconds=1)).retry_delay(n) == MAX_RETRY_DELAY
    assert GeometricBackoff(D, max_attempts=5).retry_delay(n) is None
    # A loop over the attempts would take minutes at 10**9; the arithmetic takes microseconds.
    assert time.perf_counter() - start < 5


def test_the_cap_is_reached_exactly_where_expected() -> None:
    one_us = timedelta(microseconds=1)
    cap_us = MAX_RETRY_DELAY // one_us
    # The largest exponent below the cap, and the first one above it.
    k = cap_us.bit_length() - 1
    assert GeometricBackoff(one_us).retry_delay(k + 1) == timedelta(microseconds=2**k)
    assert GeometricBackoff(one_us).retry_delay(k + 2) == MAX_RETRY_DELAY
    big = MAX_RETRY_DELAY // 3
    assert ArithmeticBackoff(big).retry_delay(2) == 3 * big
    assert ArithmeticBackoff(big).retry_delay(3) == MAX_RETRY_DELAY


@given(
    delay_ms=st.integers(1, 10**9),
    max_delay_factor=st.none() | st.integers(1, 10**6),
    n=st.integers(1, 10**12),
)
def test_growing_backoffs_are_bounded_and_monotonic(
    delay_ms: int, max_delay_factor: int | None, n: int
) -> None:
    delay = timedelta(milliseconds=delay_ms)
    max_delay = None
    if max_delay_factor is not None:
        max_delay = min(delay * max_delay_factor, MAX_RETRY_DELAY)
    cap = max_delay or MAX_RETRY_DELAY
    geometric = GeometricBackoff(delay, max_delay=max_delay)
    arithmetic = ArithmeticBackoff(delay)
    for policy, limit in ((geometric, cap), (arithmetic, MAX_RETRY_DELAY)):
        here, following = policy.retry_delay(n), policy.retry_delay(n + 1)
        assert here is not None and following is not None
        assert delay <= here <= following <= limit
    # Exact values, computed with plain integers (microseconds) so the test cannot overflow.
    us = timedelta(microseconds=1)
    assert geometric.retry_delay(n) == min(
        delay_ms * 1000 * 2 ** min(n - 1, 200), cap // us
    ) * us
    assert arithmetic.retry_delay(n) == min(
        delay_ms * 1000 * (2 * n - 1), MAX_RETRY_DELAY // us
    ) * us


def test_seconds_and_timedelta_are_the_same() -> None:
    assert LinearBackoff(10) == LinearBackoff(timedelta(seconds=10))
    assert ArithmeticBackoff(1.5).delay == timedelta(seconds=1.5)
    assert GeometricBackoff(1, max_delay=60) == GeometricBackoff(
        timedelta(seconds=1), max_delay=timedelta(minutes=1)
    )


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: LinearBackoff(0), "LinearBackoff.delay must be > 0, got 0"),
        (lambda: LinearBackoff(-1), "LinearBackoff.delay must be > 0, got -1"),
        (lambda: ArithmeticBackoff(timedelta(0)), "ArithmeticBackoff.delay must be > 0, got 0s"),
        (lambda: GeometricBackoff("10"), "GeometricBackoff.delay must be a timedelta or a number"),  # type: ignore[arg-type]
        (lambda: LinearBackoff(True), "LinearBackoff.delay must be a timedelta or a number"),
        (lambda: LinearBackoff(None), "LinearBackoff.delay must be a timedelta or a number"),  # type: ignore[arg-type]
        (lambda: LinearBackoff(float("nan")), "LinearBackoff.delay must be a finite number"),
        (lambda: LinearBackoff(timedelta(days=4000)), "LinearBackoff.delay must be at most 3650"),
        (lambda: LinearBackoff(1, max_attempts=0), "LinearBackoff.max_attempts must be >= 1"),
        (lambda: ArithmeticBackoff(1, max_attempts=-2), "ArithmeticBackoff.max_attempts must be"),
        (lambda: LinearBackoff(1, max_attempts=2.0), "LinearBackoff.max_attempts must be an int"),  # type: ignore[arg-type]
        (lambda: LinearBackoff(1, max_attempts=True), "LinearBackoff.max_attempts must be an int"),
        (lambda: LinearBackoff(1, max_attempts="3"), "LinearBackoff.max_attempts must be an int"),  # type: ignore[arg-type]
        (
            lambda: GeometricBackoff(10, max_delay=5),
            "GeometricBackoff.max_delay must be >= delay (10s), got 5",
        ),
        (lambda: GeometricBackoff(10, max_delay=-1), "GeometricBackoff.max_delay must be > 0"),
        (lambda: GeometricBackoff(10, max_delay="1h"), "GeometricBackoff.max_delay must be a"),  # type: ignore[arg-type]
        (
            lambda: GeometricBackoff(10, max_delay=timedelta(days=4000)),
            "GeometricBackoff.max_delay must be at most",
        ),
    ],
)
def test_validation_names_the_field(make: object, message: str) -> None:
    with pytest.raises(ValueError) as info:
        make()  # type: ignore[operator]
    assert str(info.value).startswith(message)


def test_abstract_base() -> None:
    with pytest.raises(TypeError):
        FailureSettings()  # type: ignore[abstract]
    for policy in (NoRetry(), LinearBackoff(1), ArithmeticBackoff(1), GeometricBackoff(1)):
        assert isinstance(policy, FailureSettings)
        hash(policy)  # frozen: usable as dict keys, shareable between threads
