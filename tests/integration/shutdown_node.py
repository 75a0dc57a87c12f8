"""A node in a process that lives on after ``shutdown``: ``python -m
tests.integration.shutdown_node URL TABLE LOG``.

Its one task ``long-0`` works ``WORK`` seconds, ignoring stop requests. As soon as it has
started, the main thread calls ``shutdown(0.2)``, logs how long that took, and the process
stays alive ``LINGER`` seconds more (a web server that stopped its scheduler).
"""

from __future__ import annotations

import logging
import sys
import threading
import time

from dbscheduler import FixedDelay, Outcome, Scheduler, TaskContext
from tests.harness.node import EventLog

WORK = 3.0
LINGER = 6.0


def main() -> None:
    url, table, log_path = sys.argv[1:4]
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s A %(name)s %(levelname)s %(message)s")
    events = EventLog(log_path, "A")
    started = threading.Event()

    def work(ctx: TaskContext) -> None:
        events.write("start", task=ctx.name, token=ctx.total_attempt)
        started.set()
        time.sleep(WORK)
        events.write("end", task=ctx.name, token=ctx.total_attempt)

    class Recorder:
        def on_finished(self, ctx: TaskContext, outcome: Outcome) -> None:
            events.write("finished", task=ctx.name, token=ctx.total_attempt,
                         status=outcome.status, written=outcome.next_at is not None)

    scheduler = Scheduler(url, table=table, node_id="A", lease=2, poll_interval=0.2)
    scheduler.add("long-0", work, schedule=FixedDelay(1))
    scheduler.add_listener(Recorder())
    scheduler.start()
    scheduler.trigger("long-0")
    if not started.wait(20):
        raise SystemExit("the task never started")
    before = time.monotonic()
    scheduler.shutdown(0.2)
    events.write("shutdown_returned", took=time.monotonic() - before)
    time.sleep(LINGER)
    events.write("exit")


if __name__ == "__main__":
    main()
