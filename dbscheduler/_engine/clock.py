"""The node's view of the database clock.

"Now" is always the database's time; the node only keeps how far the database clock is from
its own, measured on every poll, to know how long to sleep. Sleeping uses the monotonic clock,
so a wall clock that is wrong by hours, or jumps, changes nothing.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

from ..logfields import engine_log

log = engine_log("dbscheduler.clock")

SKEW_WARNING = timedelta(seconds=5)


def local_time() -> float:
    """The node's wall clock (a seam: tests replace it to simulate a skewed node)."""
    return time.time()


class Clock:
    """Tracks db time against the monotonic clock; ``until(db_time)`` gives a sleep length."""

    SAMPLE_AGE = 10.0
    """Seconds a measurement stays a candidate for the best one."""

    def __init__(self) -> None:
        self._db_minus_mono: float | None = None
        self._samples: list[tuple[float, float, float]] = []
        """Recent measurements: (monotonic time, lowest and highest database minus
        monotonic they allow)."""
        self.skew: timedelta = timedelta(0)
        """Database clock minus this node's wall clock, last measured (for operators)."""
        self._warned = False

    def observe(self, db_now: datetime, mono_before: float, mono_after: float) -> None:
        """Record a database time read between two monotonic readings."""
        mid = (mono_before + mono_after) / 2
        # The database read its clock somewhere between the two readings: the offset lies
        # between these bounds. The midpoint of a slow round trip (a loaded server answers
        # late) puts "now" milliseconds ahead, the poller wakes before the due time and its
        # pick comes back empty. So the lower bound is kept, the highest of the recent
        # measurements that agree with this one (all of them bound the same offset; one
        # that does not overlap it is from before the database clock was stepped): never
        # ahead, and behind by at most the quickest recent round trip.
        low = db_now.timestamp() - mono_after
        high = db_now.timestamp() - mono_before
        self._samples = [
            sample for sample in self._samples
            if mid - sample[0] <= self.SAMPLE_AGE
            and sample[1] <= high + 0.001 and sample[2] >= low - 0.001
        ]
        self._samples.append((mid, low, high))
        self._db_minus_mono = max(sample[1] for sample in self._samples)
        wall = local_time() - (time.monotonic() - mid)
        self.skew = timedelta(seconds=db_now.timestamp() - wall)
        if abs(self.skew) > SKEW_WARNING and not self._warned:
            self._warned = True
            log.warning(
                "this node's clock is %.1f s %s the database's; dbscheduler only uses the "
                "database clock, but other code on this node may not",
                abs(self.skew.total_seconds()),
                "behind" if self.skew > timedelta(0) else "ahead of",
            )

    def db_now(self) -> datetime:
        """An estimate of the database time now (only for sleep lengths and display)."""
        if self._db_minus_mono is None:
            return datetime.fromtimestamp(local_time(), timezone.utc)
        return datetime.fromtimestamp(time.monotonic() + self._db_minus_mono, timezone.utc)
