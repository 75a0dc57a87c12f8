"""The application every node of the "cluster in one terminal" example runs.

Each node is started with the command line (``cluster.sh`` starts three)::

    NODE_ID=node-1 dbscheduler run examples.cluster_app:scheduler

The database comes from ``DBSCHEDULER_URL`` (default: the SQLite file ``cluster.sqlite3`` in
the working directory, which nodes on one machine can share), the table from
``DBSCHEDULER_TABLE``: the same variables the ``dbscheduler`` command reads, so
``dbscheduler list`` looks at the table the nodes share.
"""

from __future__ import annotations

import logging
import os
import time
from datetime import timedelta

from dbscheduler import Cron, FixedDelay, FixedRate, LinearBackoff, Scheduler, TaskContext

DEFAULT_URL = "sqlite:///cluster.sqlite3"

log = logging.getLogger("cluster_app")

scheduler = Scheduler(
    os.environ.get("DBSCHEDULER_URL", DEFAULT_URL),
    table=os.environ.get("DBSCHEDULER_TABLE", "scheduled_tasks"),
    node_id=os.environ.get("NODE_ID"),  # default: host-pid-random
    # A short lease so that a killed node's task is taken over within seconds in the demo.
    lease=timedelta(seconds=6),
)


@scheduler.task("sync-inventory", schedule=FixedRate(2))
def sync_inventory(ctx: TaskContext) -> None:
    """Every 2 s on a fixed grid; whichever node is free takes it."""
    log.info("sync-inventory run #%d", ctx.total_attempt)
    time.sleep(0.3)


@scheduler.task("send-digest", schedule=Cron("*/5 * * * * *"))
def send_digest(ctx: TaskContext) -> None:
    """At every fifth second of the clock, once across the whole cluster."""
    log.info("send-digest for %s", ctx.scheduled_at.strftime("%H:%M:%S"))


@scheduler.task(
    "rebuild-index",
    schedule=FixedDelay(1),
    on_failure=LinearBackoff(timedelta(milliseconds=500), max_attempts=3),
)
def rebuild_index(ctx: TaskContext) -> None:
    """A long task (4 s) that stops early when asked: cancel, lost lease or shutdown.

    When the node running it dies, the execution is ``lost`` (a failed attempt): another node
    retries it as attempt 2 half a second after the lease has expired. The retry must come
    before the next regular run (1 s after the end), or the regular run wins and the attempt
    count starts again at 1.
    """
    if ctx.attempt > 1:
        log.info("rebuild-index resumes: attempt %d of this occurrence", ctx.attempt)
    else:
        log.info("rebuild-index starts (run #%d)", ctx.total_attempt)
    for _ in range(40):
        if ctx.stop_requested.wait(0.1):
            log.info("rebuild-index asked to stop; leaving early")
            return
    log.info("rebuild-index done (run #%d)", ctx.total_attempt)
