"""A registered task and one running execution of it: the records the engine passes around."""

from __future__ import annotations

import inspect
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .context import TaskContext
from .failures import FailureSettings
from .schedules import Schedule

TaskFunction = Callable[..., Any]


@dataclass(frozen=True)
class TaskDef:
    """What ``Scheduler.task`` / ``add`` registered under a name."""

    name: str
    fn: TaskFunction
    schedule: Schedule
    on_failure: FailureSettings
    takes_context: bool
    is_coroutine: bool

    @classmethod
    def build(
        cls, name: str, fn: TaskFunction, schedule: Schedule, on_failure: FailureSettings
    ) -> TaskDef:
        try:
            params = inspect.signature(fn).parameters
        except (TypeError, ValueError):
            takes_context = True
        else:
            required = [
                p
                for p in params.values()
                if p.default is p.empty
                and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            ]
            if len(required) > 1:
                raise ValueError(
                    f"task {name!r}: the function must take one argument (the TaskContext) "
                    f"or none, but {getattr(fn, '__qualname__', fn)!r} requires {len(required)}"
                )
            takes_context = bool(required) or any(
                p.kind is p.VAR_POSITIONAL for p in params.values()
            )
        is_coroutine = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
            getattr(fn, "__call__", None)  # noqa: B004 - callable objects with async __call__
        )
        return cls(name, fn, schedule, on_failure, takes_context, is_coroutine)


@dataclass(eq=False)
class Execution:
    """One pick of one row, from the pick until its finish is written (or refused)."""

    task: TaskDef
    ctx: TaskContext
    id: int
    token: int
    started_mono: float = field(default_factory=time.monotonic)
    lease_until: float = float("inf")
    """Monotonic time by which the lease surely ends, unless a heartbeat extends it."""
    margin: float = 0.0
    """How long before ``lease_until`` the node already counts the lease lost."""
    lease_lost: bool = False
    cancel_requested: bool = False
    done: threading.Event = field(default_factory=threading.Event)
    """Set once the task function has returned (or raised)."""
