"""dbscheduler: periodic tasks run from inside your services, coordinated through one SQL table.

Every node that embeds a :class:`Scheduler` shares one table, ``scheduled_tasks``, with one row
per task. A task runs at most once at a time across the whole cluster, and survives restarts and
crashed nodes with no extra infrastructure: the database you already have is the coordinator.

>>> from dbscheduler import Scheduler, FixedRate
>>> scheduler = Scheduler()                                    # doctest: +SKIP
>>> @scheduler.task("heartbeat-report", schedule=FixedRate(60))  # doctest: +SKIP
... def report(ctx): ...
>>> scheduler.run()                                            # doctest: +SKIP
"""

from .client import Client
from .context import GroupInfo, Result, RunInfo, TaskContext, TaskInfo
from .errors import (
    DatabaseUnreachable,
    LeaseLost,
    LifecycleError,
    SchedulerError,
    SchemaMismatch,
    SchemaMissing,
    TaskNotFound,
    TaskRunning,
)
from .failures import ArithmeticBackoff, FailureSettings, GeometricBackoff, LinearBackoff, NoRetry
from .health import Health
from .listeners import AlertGroup, Listener, Outcome
from .nodes import NodeInfo
from .scheduler import Scheduler
from .schedules import Cron, Dynamic, FixedDelay, FixedRate, Once, Schedule

__all__ = [
    "AlertGroup",
    "ArithmeticBackoff",
    "Client",
    "Cron",
    "DatabaseUnreachable",
    "Dynamic",
    "FailureSettings",
    "FixedDelay",
    "FixedRate",
    "GeometricBackoff",
    "GroupInfo",
    "Health",
    "LeaseLost",
    "LifecycleError",
    "LinearBackoff",
    "Listener",
    "NoRetry",
    "NodeInfo",
    "Once",
    "Outcome",
    "Result",
    "RunInfo",
    "Schedule",
    "Scheduler",
    "SchedulerError",
    "SchemaMismatch",
    "SchemaMissing",
    "TaskContext",
    "TaskInfo",
    "TaskNotFound",
    "TaskRunning",
]

__version__ = "0.1.0"
