"""Task functions that tests run with ``isolation="process"`` (a child process imports them by
name). They log to the node's event file, named by ``HARNESS_LOG`` / ``HARNESS_NODE``."""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Any

from dbscheduler import Result, TaskContext


def _log(event: str, **fields: Any) -> None:
    line = json.dumps({"event": event, "node": os.environ.get("HARNESS_NODE", "?"),
                       "t": time.time(), "pid": os.getpid(), **fields})
    fd = os.open(os.environ["HARNESS_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def hang(ctx: TaskContext) -> None:
    """Never returns, and ignores its stop request (only a kill ends it)."""
    _log("child_start", task=ctx.name, token=ctx.total_attempt)
    ctx.stop_requested.wait()
    _log("child_stop_seen", task=ctx.name, token=ctx.total_attempt)
    while True:
        time.sleep(0.05)


def crash(ctx: TaskContext) -> None:
    """Dies of SIGSEGV, as a broken C extension would."""
    _log("child_start", task=ctx.name, token=ctx.total_attempt)
    os.kill(os.getpid(), signal.SIGSEGV)


def leave(ctx: TaskContext) -> None:
    """Exits the child with code 3 without a word."""
    _log("child_start", task=ctx.name, token=ctx.total_attempt)
    os._exit(3)


def polite(ctx: TaskContext) -> None:
    """Works until asked to stop, then returns at once."""
    _log("child_start", task=ctx.name, token=ctx.total_attempt)
    ctx.stop_requested.wait(60)
    _log("child_end", task=ctx.name, token=ctx.total_attempt)


def quick(ctx: TaskContext) -> Result:
    """Returns at once, storing which process ran it and the state it was given."""
    _log("child_start", task=ctx.name, token=ctx.total_attempt)
    _log("child_end", task=ctx.name, token=ctx.total_attempt)
    return Result.success(state={"pid": os.getpid(), "runs": (ctx.state or {}).get("runs", 0) + 1})
