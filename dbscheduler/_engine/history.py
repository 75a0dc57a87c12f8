"""The run history's settings and its built-in pruning task, ``dbscheduler.prune-runs``.

Every node with history on registers the task in the same table (``FixedRate(10 min)``), so,
like any task, exactly one node runs it at a time. It deletes runs older than ``history`` and,
per task, those beyond its ``history_per_task`` newest, each in statements of at most
:data:`~dbscheduler._store.PRUNE_BATCH` rows: a backlog of a million rows is thousands of short
autocommit statements, never one long lock or transaction. Between two statements it waits as
long as the last one took, so a backlog is deleted at about half the speed the database could,
and the executions of the node that prunes (and of the others) keep most of their pace. The
node that runs it applies its own settings.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta

from .._store import Store, prune_beyond, prune_older
from ..context import TaskContext
from ..failures import NoRetry
from ..logfields import engine_log
from ..schedules import FixedRate
from ..table import RESERVED_PREFIX
from .durations import duration
from .execution import TaskDef

__all__ = ["MAX_PAUSE", "PRUNE_EVERY", "PRUNE_TASK", "HistorySettings", "builtin_tasks", "gently"]

log = engine_log("dbscheduler.history")

PRUNE_TASK = f"{RESERVED_PREFIX}prune-runs"
PRUNE_EVERY = timedelta(minutes=10)


@dataclass(frozen=True)
class HistorySettings:
    """How long runs are kept: by age, and per task by count (``None``: no count limit)."""

    keep: timedelta
    per_task: int | None

    @classmethod
    def of(cls, history: timedelta | float | None,
           per_task: int | None) -> HistorySettings | None:
        """The settings of ``Scheduler(history=…, history_per_task=…)``, checked; ``None``
        when ``history`` is ``None`` (no history written)."""
        if per_task is not None and (isinstance(per_task, bool) or not isinstance(per_task, int)
                                     or per_task < 1):
            raise ValueError(
                f"history_per_task must be an integer >= 1 or None, got {per_task!r}")
        if history is None:
            return None
        if isinstance(history, (int, float)) and not isinstance(history, bool):
            history = timedelta(seconds=history)  # seconds, up to any number of years
        return cls(duration(history, "history"), per_task)


def builtin_tasks(store: Store, settings: HistorySettings | None) -> dict[str, TaskDef]:
    """dbscheduler's own tasks for a node with these settings, by name."""
    if settings is None:
        return {}
    return {PRUNE_TASK: TaskDef.build(PRUNE_TASK, Pruner(store, settings),
                                      FixedRate(PRUNE_EVERY), NoRetry())}


class Pruner:
    """The function of ``dbscheduler.prune-runs``: age limit first, then the count limit,
    in short batches, stopping between two batches when asked."""

    def __init__(self, store: Store, settings: HistorySettings) -> None:
        self.store = store
        self.settings = settings

    def __repr__(self) -> str:
        return f"<Pruner keep={self.settings.keep} per_task={self.settings.per_task}>"

    def __call__(self, ctx: TaskContext) -> None:
        cutoff = ctx.started_at - self.settings.keep
        old = sum(gently(prune_older(self.store, cutoff), ctx.stop_requested))
        crowded = 0
        if self.settings.per_task is not None and not ctx.stop_requested.is_set():
            crowded = sum(gently(prune_beyond(self.store, self.settings.per_task),
                                 ctx.stop_requested))
        if old or crowded:
            log.info("pruned the run history: %d run(s) finished before %s, %d beyond the "
                     "newest %s of their task", old, cutoff.isoformat(), crowded,
                     self.settings.per_task)


MAX_PAUSE = 1.0
"""The longest wait between two batches of the prune, in seconds."""


def gently(batches: Iterator[int], stop: threading.Event) -> Iterator[int]:
    """The rows each of ``batches`` deleted; after each, a wait as long as it took (at most
    :data:`MAX_PAUSE`), ending early and for good once ``stop`` is set.

    >>> sum(gently(iter([500, 500, 12]), threading.Event()))
    1012
    """
    began = time.monotonic()
    for deleted in batches:
        yield deleted
        if stop.wait(min(time.monotonic() - began, MAX_PAUSE)):
            return
        began = time.monotonic()
