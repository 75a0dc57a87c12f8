"""A real scheduler node for multi-process tests: ``python -m tests.harness.node --url …``.

Started by :class:`tests.harness.Cluster` (conformance and chaos suites alike).

It registers N tasks, runs until SIGTERM/SIGINT (graceful shutdown) or ``--seconds``, and
appends one JSON line per event to ``--log``: ``start``/``end`` of every execution with the
task, node, fencing token and wall-clock times (all nodes share this machine's clock), plus
``finished`` (with whether the finish was written), ``lease_lost``, ``lost_execution``, and
the lateness alerts ``overdue`` and ``recovered``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from dbscheduler import (
    Client,
    FixedDelay,
    FixedRate,
    LeaseLost,
    LinearBackoff,
    Outcome,
    Result,
    Scheduler,
    TaskContext,
    TaskInfo,
)
from tests.harness import isolated
from tests.helpers import is_settled

_real_time = time.time
"""The machine's wall clock, kept before ``--skew-wall`` may shift ``time.time``: events are
always stamped with it, so the logs of every node share one clock."""


def read_events(path: Path | str) -> list[dict[str, Any]]:
    """The complete lines of an event log (none if it does not exist yet).

    A reader can see a line that a node is still writing (reads and writes of a file are not
    atomic with respect to each other): a last line without its newline is left for the next
    read.
    """
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return []
    complete = text[: text.rfind("\n") + 1]
    return [json.loads(line) for line in complete.splitlines() if line.strip()]


class EventLog:
    def __init__(self, path: str, node: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._node = node
        self._lock = threading.Lock()

    def write(self, event: str, **fields: Any) -> None:
        line = json.dumps({"event": event, "node": self._node, "t": _real_time(), **fields})
        with self._lock:
            os.write(self._fd, (line + "\n").encode())


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--table", required=True)
    p.add_argument("--node", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--tasks", type=int, default=4)
    p.add_argument("--prefix", default="task")
    p.add_argument("--rate", type=float, default=0.5, help="FixedRate period, s")
    p.add_argument("--delay", type=float, default=None, help="use FixedDelay instead")
    p.add_argument("--work", type=float, default=0.2, help="seconds each execution works")
    p.add_argument("--ignore-stop", action="store_true", help="keep working when asked to stop")
    p.add_argument("--lease", type=float, default=3.0)
    p.add_argument("--poll", type=float, default=0.5)
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--seconds", type=float, default=None)
    p.add_argument("--skew", type=float, default=0.0, help="shift this node's wall clock, s")
    p.add_argument("--retry", type=float, default=None, help="LinearBackoff delay, s")
    p.add_argument("--shutdown-timeout", type=float, default=10.0)
    p.add_argument("--skew-wall", action="store_true",
                   help="with --skew, also shift time.time for the whole process")
    p.add_argument("--state", action="store_true",
                   help="each execution stores {token, node} as the task's state and logs the "
                        "token it read (prev) at its start: a chain that shows every write")
    p.add_argument("--group", action="append", default=[], metavar="PREFIX:COUNT:WORK[:ignore]",
                   help="also register COUNT tasks PREFIX-i working WORK s (same schedule); "
                        "':ignore' makes them ignore stop requests")
    p.add_argument("--task-options", action="append", default=[], metavar="PREFIX=JSON",
                   help="execution options (JSON object) for the tasks whose names start with "
                        "PREFIX")
    p.add_argument("--tags", default="", help="comma-separated node tags")
    p.add_argument("--fence-table", default=None, metavar="TABLE",
                   help="each execution ends by inserting (task, node, token) into TABLE "
                        "through ctx.fenced, logging 'fenced' or 'fence_refused'")
    p.add_argument("--fence-only", default="", metavar="PREFIX",
                   help="with --fence-table: only tasks whose name starts with PREFIX")
    p.add_argument("--fence-engine", choices=("plain", "scheduler"), default="plain",
                   help="with --fence-table: ctx.fenced on a plain sa.create_engine(url), or "
                        "on the scheduler's own engine")
    p.add_argument("--isolated", action="append", default=[], metavar="NAME=FUNCTION",
                   help="also register task NAME running tests.harness.isolated.FUNCTION in a "
                        "child process (isolation='process')")
    p.add_argument("--fail-while", default=None, metavar="PATH",
                   help="executions raise while the file PATH exists")
    p.add_argument("--fail-only", default="", metavar="PREFIX",
                   help="with --fail-while: only tasks whose name starts with PREFIX")
    p.add_argument("--alert-after", type=float, default=None, metavar="S",
                   help="register every task with alert_after=S")
    p.add_argument("--overdue-after", type=float, default=60.0, metavar="S")
    p.add_argument("--overdue-check", type=float, default=30.0, metavar="S")
    p.add_argument("--batch", default=None, metavar="HANDLER",
                   help="register a batch handler that logs every delivery (deliver_start with "
                        "its items' ids, deliver_end) and, with --push, push to it")
    p.add_argument("--batch-work", type=float, default=0.0,
                   help="seconds each delivery works")
    p.add_argument("--batch-hang-first", type=float, default=0.0,
                   help="seconds a first attempt (ctx.attempt == 1) hangs: a node to kill")
    p.add_argument("--batch-fail", type=float, default=0.0,
                   help="probability that a delivery fails (seeded by node name)")
    p.add_argument("--push", default=None, metavar="KEYS:COUNT",
                   help="push COUNT items, each {id, key}, round-robin over KEYS keys "
                        "(k-0 …) from a thread while delivering; logs 'pushed' per item")
    p.add_argument("--push-only", action="store_true",
                   help="with --push: push from a Client and run no scheduler (a process "
                        "frozen inside its push then holds nothing else open)")
    p.add_argument("--watchdog", type=float, default=None, metavar="S",
                   help="shut down gracefully after S s, or as soon as the process that "
                        "started this node is gone (no orphans if a test run dies)")
    args = p.parse_args(argv)

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format=f"%(asctime)s {args.node} %(name)s %(levelname)s %(message)s")
    if args.skew:
        # Every use of the node's wall clock inside the library goes through this seam.
        import dbscheduler._engine.clock as clock

        real = time.time
        clock.local_time = lambda: real() + args.skew  # type: ignore[assignment]
        if args.skew_wall:
            time.time = lambda: _real_time() + args.skew

    events = EventLog(args.log, args.node)
    if args.push_only:
        with Client(args.url, table=args.table) as client:
            push_items(client, events, args)
        return
    # Isolated children log through the same file (tests.harness.isolated reads these).
    os.environ["HARNESS_LOG"], os.environ["HARNESS_NODE"] = args.log, args.node
    tags = [t for t in args.tags.split(",") if t]
    scheduler = Scheduler(args.url, table=args.table, node_id=args.node,
                          max_workers=args.workers, lease=args.lease, poll_interval=args.poll,
                          tags=tags, overdue_after=args.overdue_after,
                          overdue_check=args.overdue_check)
    task_options = [(prefix, json.loads(text))
                    for prefix, text in (o.split("=", 1) for o in args.task_options)]

    def options_for(name: str) -> dict[str, Any]:
        return next((o for prefix, o in task_options if name.startswith(prefix)), {})

    fence_engine = (None if not args.fence_table
                    else scheduler.engine if args.fence_engine == "scheduler"
                    else sa.create_engine(args.url))
    effects = (sa.Table(args.fence_table, sa.MetaData(), sa.Column("task", sa.String(200)),
                        sa.Column("node", sa.String(200)), sa.Column("token", sa.Integer))
               if args.fence_table else None)

    def fenced_write(ctx: TaskContext) -> None:
        assert fence_engine is not None and effects is not None
        try:
            with ctx.fenced(fence_engine) as conn:
                conn.execute(effects.insert().values(task=ctx.name, node=args.node,
                                                     token=ctx.total_attempt))
        except LeaseLost as exc:
            events.write("fence_refused", task=ctx.name, token=ctx.total_attempt,
                         reason=getattr(exc, "reason", None))
        except Exception as exc:
            events.write("fence_error", task=ctx.name, token=ctx.total_attempt,
                         error=repr(exc)[:500])
            raise
        else:
            events.write("fenced", task=ctx.name, token=ctx.total_attempt)

    def make_work(seconds: float, ignore_stop: bool) -> Callable[[TaskContext], Result | None]:
        def work(ctx: TaskContext) -> Result | None:
            start = time.time()
            extra: dict[str, Any] = {}
            if args.state:
                extra["prev"] = ctx.state.get("token") if isinstance(ctx.state, dict) else None
            events.write("start", task=ctx.name, token=ctx.total_attempt, attempt=ctx.attempt,
                         scheduled=ctx.scheduled_at.timestamp(),
                         started=ctx.started_at.timestamp(), **extra)
            deadline = start + seconds
            stopped = False
            while time.time() < deadline:
                if ctx.stop_requested.wait(min(0.05, max(0.0, deadline - time.time()))):
                    stopped = True
                    if not ignore_stop:
                        break
            if fence_engine is not None and ctx.name.startswith(args.fence_only):
                fenced_write(ctx)
            events.write("end", task=ctx.name, token=ctx.total_attempt, start=start,
                         stop_requested=stopped)
            if (args.fail_while is not None and ctx.name.startswith(args.fail_only)
                    and Path(args.fail_while).exists()):
                raise RuntimeError(f"failing on purpose (token {ctx.total_attempt})")
            if args.state:
                return Result.success(state={"token": ctx.total_attempt, "node": args.node})
            return None

        return work

    work = make_work(args.work, args.ignore_stop)

    schedule = FixedDelay(args.delay) if args.delay is not None else FixedRate(args.rate)
    on_failure = LinearBackoff(args.retry) if args.retry else None
    alert_after = None if args.alert_after is None else timedelta(seconds=args.alert_after)
    for i in range(args.tasks):
        name = f"{args.prefix}-{i}"
        scheduler.add(name, work, schedule=schedule, on_failure=on_failure,
                      alert_after=alert_after, **options_for(name))
    for group in args.group:
        prefix, count, seconds, *flags = group.split(":")
        group_work = make_work(float(seconds), "ignore" in flags)
        for i in range(int(count)):
            name = f"{prefix}-{i}"
            scheduler.add(name, group_work, schedule=schedule, on_failure=on_failure,
                          alert_after=alert_after, **options_for(name))
    for spec in args.isolated:
        name, function = spec.split("=", 1)
        scheduler.add(name, getattr(isolated, function), schedule=schedule,
                      on_failure=on_failure, **{"isolation": "process", **options_for(name)})

    class Recorder:
        def on_finished(self, ctx: TaskContext, outcome: Outcome) -> None:
            events.write("finished", task=ctx.name, token=ctx.total_attempt,
                         status=outcome.status, written=outcome.next_at is not None,
                         started=ctx.started_at.timestamp())

        def on_lease_lost(self, ctx: TaskContext) -> None:
            events.write("lease_lost", task=ctx.name, token=ctx.total_attempt)

        def on_lost_execution(self, info: TaskInfo) -> None:
            events.write("lost_execution", task=info.name, lost_node=info.locked_by,
                         token=info.total_attempt)

        def on_overdue(self, info: TaskInfo, late_by: timedelta) -> None:
            events.write("overdue", task=info.name, late_by=late_by.total_seconds(),
                         last_status=info.last_status)

        def on_recovered(self, info: TaskInfo) -> None:
            events.write("recovered", task=info.name, last_status=info.last_status)

    if args.batch:
        add_batch(scheduler, events, args)
    scheduler.add_listener(Recorder())
    events.write("node_start", pid=os.getpid())

    def announce_settled() -> None:
        # Tests wait for this event instead of sleeping "until the node has polled and its
        # LISTEN is up". A node that never gets there (no LISTEN behind a pooler) stops
        # looking after a while.
        deadline = time.monotonic() + 300
        while not is_settled(scheduler):
            if time.monotonic() > deadline:
                return
            time.sleep(0.02)
        events.write("settled")

    threading.Thread(target=announce_settled, name="node-settled", daemon=True).start()
    if args.seconds is not None:
        threading.Timer(args.seconds, scheduler.shutdown,
                        kwargs={"timeout": args.shutdown_timeout}).start()
    if args.watchdog is not None:
        parent, deadline = os.getppid(), time.monotonic() + args.watchdog

        def watchdog() -> None:
            while os.getppid() == parent and time.monotonic() < deadline:
                time.sleep(0.5)
            scheduler.shutdown(timeout=args.shutdown_timeout)

        threading.Thread(target=watchdog, name="node-watchdog", daemon=True).start()
    if args.batch and args.push:
        threading.Thread(target=push_items, args=(scheduler, events, args), name="pusher",
                         daemon=True).start()
    scheduler.run(shutdown_timeout=args.shutdown_timeout)
    events.write("node_stop")


def add_batch(scheduler: Scheduler, events: EventLog, args: argparse.Namespace) -> None:
    """The ``--batch`` handler: log what each delivery got; hang or fail as asked."""
    chance = random.Random(f"{args.node}-fail")
    lock = threading.Lock()

    @scheduler.batch_handler(args.batch, on_failure=LinearBackoff(0.2))
    def deliver(ctx: TaskContext, items: list[Any]) -> None:
        ids = [item["id"] if isinstance(item, dict) else item for item in items]
        events.write("deliver_start", task=ctx.name, token=ctx.total_attempt,
                     attempt=ctx.attempt, items=ids, started=ctx.started_at.timestamp())
        if ctx.attempt == 1 and args.batch_hang_first:
            ctx.stop_requested.wait(args.batch_hang_first)
        time.sleep(args.batch_work)
        with lock:
            fail = chance.random() < args.batch_fail
        events.write("deliver_end", task=ctx.name, token=ctx.total_attempt, failed=fail)
        if fail:
            raise RuntimeError("delivery failed on purpose")


def push_items(scheduler: Scheduler | Client, events: EventLog,
               args: argparse.Namespace) -> None:
    """``--push KEYS:COUNT``: every item is logged once its push returned."""
    keys, count = (int(v) for v in args.push.split(":"))
    for i in range(count):
        item_id = f"{args.node}-{i}"
        key = f"k-{i % keys}"
        try:
            scheduler.push(key, {"id": item_id, "key": key}, handler=args.batch,
                           update="once" if i % 2 else "always")
        except Exception as exc:  # an unconfirmed push: the test does not count it
            events.write("push_failed", item=item_id, error=str(exc))
            continue
        events.write("pushed", item=item_id, key=key)
    events.write("push_done", count=count)


if __name__ == "__main__":
    main()
