"""Tests that restart the shared database servers run alone, when the suite runs in workers.

Every other test holds the lock shared; a test marked ``restarts_servers`` holds it exclusive,
so no other worker has a test in flight while PostgreSQL or MariaDB goes down. A turnstile
gives the exclusive holder priority: once it waits, new shared holders queue behind it.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path


@contextmanager
def servers_lock(directory: Path, exclusive: bool) -> Iterator[None]:
    with ExitStack() as stack:
        turnstile = stack.enter_context(open(directory / "servers.turnstile", "a+"))
        main = stack.enter_context(open(directory / "servers.lock", "a+"))
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        if exclusive:
            fcntl.flock(main, fcntl.LOCK_EX)
            stack.callback(fcntl.flock, turnstile, fcntl.LOCK_UN)
        else:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
            fcntl.flock(main, fcntl.LOCK_SH)
        stack.callback(fcntl.flock, main, fcntl.LOCK_UN)
        yield
