"""What every node process shares: sample recording, statement counting and the line protocol.

Standard library only: the peers' node scripts import this module from their own virtual
environments.

The orchestrator starts a node with ``python -m bench.nodes.<system> CONFIG_JSON``. The node
prints ``ready {json}`` once its scheduler runs, then answers one command per stdin line,
``<command> <json>``, with ``ok <json>`` or ``err <text>``. Commands every node understands:

* ``activate {"start": a, "stop": b, "period": p, "lead": s}``: make tasks ``a..b-1`` due every
  ``p`` seconds from about ``lead`` seconds from now; replies ``{"t0": …, "spread": bool}``:
  task ``i`` fires at ``t0 + (i - a) * p / (b - a) + k * p`` when ``spread``, else at
  ``t0 + k * p``;
* ``burst {"n": n, "lead": s}``: make tasks ``0..n-1`` due once, all at the same instant
  ``t0``, at least ``lead`` seconds from now (plus whatever the node needs to set them up);
  replies ``{"t0": …}``;
* ``dump {"path": …}``: write the samples recorded since the last dump and forget them;
* ``stats {}``: statements sent so far (by first keyword) and CPU seconds used;
* ``stop {}``: shut the scheduler down gracefully and exit.

A closed stdin (the orchestrator died) stops the node too, and every node exits on its own
after ``max_seconds`` (bounded runs, no orphans).
"""

from __future__ import annotations

import collections
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

Handler = Callable[[dict[str, Any]], dict[str, Any] | None]


class Samples:
    """``(task index, scheduled epoch, started epoch)`` triples, appended from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: list[tuple[int, float, float]] = []

    def add(self, idx: int, scheduled: float, started: float) -> None:
        with self._lock:
            self._items.append((idx, scheduled, started))

    def take(self) -> list[tuple[int, float, float]]:
        with self._lock:
            items, self._items = self._items, []
        return items


SAMPLES = Samples()
"""The node's samples: task functions of every system write here."""


class StatementCounter:
    """Counts SQL statements a node sends, by first keyword, at the driver.

    On PostgreSQL every system under test uses psycopg 3, so patching its cursor classes
    counts all of them the same way (SQLAlchemy's pre-ping included; ``BEGIN``/``COMMIT``,
    which psycopg sends itself, are not statements of the application and are not counted).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: collections.Counter[str] = collections.Counter()

    def add(self, query: object, n: int = 1) -> None:
        if isinstance(query, bytes):
            query = query.decode(errors="replace")
        text = query if isinstance(query, str) else "composed"
        word = text.lstrip(" (\n\t").split(None, 1)[0].upper() if text.strip() else "?"
        with self._lock:
            self.counts[word] += n

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.counts)

    def install_psycopg(self) -> None:
        import psycopg

        counter = self

        def wrap(cls: Any, many: bool, is_async: bool) -> None:
            name = "executemany" if many else "execute"
            original = getattr(cls, name)

            if is_async:

                async def patched_async(self: Any, query: Any, params: Any = None,
                                        *args: Any, **kw: Any) -> Any:
                    counter.add(query, _count(params) if many else 1)
                    return await original(self, query, params, *args, **kw)

                setattr(cls, name, patched_async)
            else:

                def patched(self: Any, query: Any, params: Any = None,
                            *args: Any, **kw: Any) -> Any:
                    counter.add(query, _count(params) if many else 1)
                    return original(self, query, params, *args, **kw)

                setattr(cls, name, patched)

        for cls, is_async in ((psycopg.Cursor, False), (psycopg.AsyncCursor, True)):
            wrap(cls, False, is_async)
            wrap(cls, True, is_async)

    def install_sqlalchemy(self, engine: Any) -> None:
        """For SQLite and MariaDB (dbscheduler only): SQLAlchemy's cursor event."""
        from sqlalchemy import event

        def before(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any,
                   executemany: bool) -> None:
            self.add(statement, len(parameters) if executemany else 1)

        event.listen(engine, "before_cursor_execute", before)


def _count(params: Any) -> int:
    try:
        return len(params)
    except TypeError:
        return 1


COUNTER = StatementCounter()


def reply(kind: str, payload: object) -> None:
    sys.stdout.write(f"{kind} {json.dumps(payload)}\n")
    sys.stdout.flush()


def load_config() -> dict[str, Any]:
    config: dict[str, Any] = json.loads(sys.argv[1])
    return config


def watchdog(max_seconds: float) -> None:
    """Exit hard after ``max_seconds`` whatever happens (bounded runs)."""

    def fire() -> None:
        sys.stderr.write(f"node: watchdog fired after {max_seconds} s; exiting\n")
        os._exit(3)

    timer = threading.Timer(max_seconds, fire)
    timer.daemon = True
    timer.start()


def serve(handlers: dict[str, Handler], stop: Callable[[], None],
          ready: dict[str, Any] | None = None) -> None:
    """Answer commands until ``stop`` or end of input; then call ``stop`` (once)."""
    base: dict[str, Handler] = {
        "dump": _dump,
        "stats": lambda _: {"statements": COUNTER.snapshot(), "cpu": time.process_time(),
                            "time": time.time()},
    }
    base.update(handlers)
    reply("ready", ready or {})
    for line in sys.stdin:
        command, _, arg = line.strip().partition(" ")
        if not command:
            continue
        if command == "stop":
            break
        handler = base.get(command)
        if handler is None:
            reply("err", f"unknown command {command!r}")
            continue
        try:
            result = handler(json.loads(arg) if arg else {})
        except Exception as exc:
            reply("err", f"{type(exc).__name__}: {exc}")
        else:
            reply("ok", result or {})
    try:
        stop()
    finally:
        reply("ok", {"stopped": True})


def _dump(args: dict[str, Any]) -> dict[str, Any]:
    items = SAMPLES.take()
    with open(args["path"], "w") as fh:
        json.dump(items, fh)
    return {"count": len(items)}


def spread_t0(lead: float) -> float:
    """The first fire time of an activation: ``lead`` seconds from now, on a 10 ms boundary."""
    return round(time.time() + lead, 2)


# -- task functions peers reference by import path --------------------------------------------
def aps3_noop(idx: int) -> None:
    """APScheduler 3's job: the start is taken by the patched ``run_job`` (it knows the run
    time); the function itself does nothing."""


async def aps4_noop(idx: int) -> None:
    """APScheduler 4's job (async executor): records its scheduled fire time and its start."""
    started = time.time()
    from apscheduler import current_job  # type: ignore[import-not-found]

    job = current_job.get()
    SAMPLES.add(idx, job.scheduled_fire_time.timestamp() if job.scheduled_fire_time else started,
                started)
