"""Quick start: a few periodic tasks on the embedded SQLite default, no set-up at all.

Run it (from a checkout, or anywhere once ``pip install dbscheduler`` is done)::

    python examples/quickstart.py --seconds 10

It prints every execution as it happens, stops after ``--seconds`` (or on Ctrl-C) and shows
what the table holds. The tasks' rows live in ``./dbscheduler.sqlite3``: run it again and the
``counter`` task goes on from the count it persisted; look at them with ``dbscheduler list``.
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
from datetime import timedelta

from dbscheduler import (
    Cron,
    FixedDelay,
    FixedRate,
    LinearBackoff,
    Outcome,
    Result,
    Scheduler,
    TaskContext,
)

log = logging.getLogger("quickstart")

scheduler = Scheduler()  # the embedded default: ./dbscheduler.sqlite3, created on first use


@scheduler.task("heartbeat", schedule=FixedRate(1))
def heartbeat(ctx: TaskContext) -> None:
    """Every second, on a fixed grid (a slow run does not shift the next ones)."""
    log.info("heartbeat      run #%d", ctx.total_attempt)


@scheduler.task("on-the-clock", schedule=Cron("*/2 * * * * *"))
def on_the_clock(ctx: TaskContext) -> None:
    """Cron with 6 fields: the SECONDS come first (here: every even second)."""
    log.info("on-the-clock   cron fire for %s", ctx.scheduled_at.strftime("%H:%M:%S"))


@scheduler.task("counter", schedule=FixedDelay(1))
def counter(ctx: TaskContext) -> Result:
    """One second after each run ends; keeps its state in the row (JSON)."""
    count = (ctx.state or {}).get("count", 0) + 1
    log.info("counter        count = %d (stored in the row)", count)
    return Result.success(state={"count": count})


@scheduler.task(
    "flaky",
    schedule=FixedRate(1.5),
    on_failure=LinearBackoff(timedelta(seconds=0.5), max_attempts=3),
)
def flaky(ctx: TaskContext) -> Result | None:
    """Fails on its first attempt; the failure setting retries it half a second later."""
    if ctx.attempt == 1:
        log.info("flaky          attempt 1 fails")
        return Result.error("upstream not ready")  # raising an exception works the same way
    log.info("flaky          attempt %d succeeds", ctx.attempt)
    return None


class ShowFailures:
    """A listener: prints when a failed task runs next."""

    def on_finished(self, ctx: TaskContext, outcome: Outcome) -> None:
        if outcome.status != "success" and outcome.next_at is not None:
            log.info("  -> %s %s (%s); next try at %s", ctx.name, outcome.status, outcome.error,
                     outcome.next_at.strftime("%H:%M:%S.%f")[:-3])


scheduler.add_listener(ShowFailures())


def main(argv: list[str] | None = None) -> None:
    """Run the node for ``--seconds`` (default: until Ctrl-C), then print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=None,
                        help="stop after this many seconds (default: run until Ctrl-C)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stdout,
                        format="%(asctime)s.%(msecs)03d  %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("dbscheduler").setLevel(logging.WARNING)

    timer = None
    if args.seconds is not None:
        timer = threading.Timer(args.seconds, scheduler.shutdown, kwargs={"timeout": 10})
        timer.daemon = True
        timer.start()
    until = "Ctrl-C" if args.seconds is None else f"{args.seconds:g} s"
    print(f"running 4 tasks on {scheduler.engine.url} until {until}")
    scheduler.run(shutdown_timeout=10)  # blocks; Ctrl-C / SIGTERM shut down gracefully
    if timer is not None:
        timer.cancel()

    print("\nwhat the table holds now (also: dbscheduler list):")
    infos = scheduler.tasks()
    width = max(len(info.name) for info in infos)  # the built-in task's name is the longest
    for info in infos:
        print(f"  {info.name:{width}}  runs={info.total_attempt:<3} "
              f"last={info.last_status or '-':8} state={info.state}")


if __name__ == "__main__":
    main()
