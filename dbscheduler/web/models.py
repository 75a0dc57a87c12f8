"""The JSON shapes of the API (and of its OpenAPI document): the same fields as the command
line's ``--json``."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, model_validator

from ..table import RUN_STATUSES

__all__ = [
    "ApiError",
    "BulkBody",
    "BulkFailure",
    "BulkResult",
    "Cancelled",
    "Deleted",
    "Group",
    "GroupList",
    "Health",
    "Node",
    "NodeList",
    "RescheduleBody",
    "Run",
    "RunList",
    "ScheduleBody",
    "SchedulePreview",
    "ScheduledTask",
    "Task",
    "TaskList",
    "UpcomingTimes",
]


class ApiError(BaseModel):
    """Every error the API answers: a stable code and a sentence for people."""

    error: str = Field(examples=["not_found"])
    message: str = Field(examples=["no task named 'x' in table 'scheduled_tasks'"])


class Task(BaseModel):
    """A task's row, as ``dbscheduler show --json`` prints it (timestamps ISO 8601 UTC)."""

    id: int
    name: str
    state: Any = Field(description="the task's persisted state (decoded JSON), or null")
    created_at: datetime
    next_process_at: datetime = Field(description="next due time; while it runs, its lease")
    attempt: int
    reenqueue_attempt: int
    total_attempt: int
    paused: bool
    locked_by: str | None
    heartbeat_at: datetime | None
    last_started_at: datetime | None
    last_finished_at: datetime | None
    last_status: str | None
    last_error: str | None
    schedule: str | None
    stop_requested: bool
    state_error: str | None = Field(
        default=None, description="why the stored state cannot be decoded, if it cannot")
    raw_state: str | None = Field(
        default=None, description="the stored state's text, when it cannot be decoded")
    handler: str | None = Field(
        default=None, description="the handler that runs the row (a declared task's own name)")
    data: Any = Field(default=None, description="the row's data (decoded JSON), or null")
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="the row's execution options that differ from the defaults (priority, "
                    "group, requires, timeout, isolation, misfire, grace, jitter; durations "
                    "in seconds)")
    last_success_at: datetime | None = Field(
        default=None, description="when it last succeeded, if known")
    alert_after: float | None = Field(
        default=None, description="dead-man limit in seconds: late without a success so long")
    alerted_at: datetime | None = Field(
        default=None, description="when its open lateness alert was raised, if one is open")
    overdue: bool = Field(
        default=False, description="late: due over a minute ago and not picked, or past "
                                   "alert_after without a success")
    running: bool
    builtin: bool = Field(
        default=False, description="one of dbscheduler's own tasks (dbscheduler.prune-runs)")


class ScheduledTask(Task):
    """A runtime task just created or updated, and why it may never run."""

    warning: str | None = Field(
        default=None, description="set when no live or recent node has its handler (with "
                                  "the closest handler that exists); null otherwise")


class Run(BaseModel):
    """One finished execution, as ``dbscheduler runs --json`` prints it."""

    id: int
    name: str
    token: int = Field(description="the execution's fencing token")
    attempt: int
    node_id: str = Field(description="the node that ran it (lost: the node that vanished)")
    scheduled_at: datetime
    started_at: datetime
    finished_at: datetime
    status: str = Field(description=", ".join(RUN_STATUSES))
    error: str | None
    traceback: str | None = Field(
        default=None, description="the traceback of a failure that raised (innermost frames, "
                                  "at most 8 KB)")
    duration: float = Field(description="seconds from start to finish")


class RunList(BaseModel):
    """Finished executions, newest first."""

    runs: list[Run]
    limit: int
    next_cursor: str | None = Field(
        default=None, description="when the page is full: the cursor of its next, older page")


class Node(BaseModel):
    """A node of the registry, as ``dbscheduler nodes --json`` prints it."""

    node_id: str
    host: str
    pid: int
    version: str = Field(description="the dbscheduler version it runs")
    tags: list[str]
    handlers: list[str] = Field(description="its handlers for runtime tasks and batches")
    started_at: datetime
    last_seen: datetime = Field(description="its last write, on the database clock")
    running: int = Field(description="executions it ran at its last write")
    alive: bool = Field(description="seen within the last 30 s")
    tasks: list[str] = Field(description="the tasks it holds now")


class NodeList(BaseModel):
    """Every node of the registry, the most recently seen first."""

    nodes: list[Node]
    db_now: datetime


class Group(BaseModel):
    """A concurrency group: its limit (null: none) and its executions running now."""

    group: str
    limit: int | None
    running: int
    tasks: int = Field(description="tasks of the group")


class GroupList(BaseModel):
    """Every group that has a limit or tasks, by name."""

    groups: list[Group]


class TaskList(BaseModel):
    """One page of the filtered tasks, the total for pagination, and counts by state."""

    tasks: list[Task]
    total: int = Field(description="tasks matching state and q, over all pages")
    limit: int
    offset: int
    counts: dict[str, int] = Field(description="tasks in each state (all, running, paused, …)")
    db_now: datetime = Field(description="the database clock the states were computed on")
    batch_keys: int = Field(default=0, description="batch keys left out (kind=tasks)")
    exact: bool = Field(default=True, description=(
        "false when more rows than the count's cap (10,000) matched and exact=false was "
        "asked (the default): total and counts are then those of the rows counted, lower "
        "bounds"))
    estimate: int | None = Field(default=None, description=(
        "when not exact, the database's estimate of the table's rows (null if none)"))


class UpcomingTimes(BaseModel):
    """The next fire times of a task and what they assume."""

    name: str
    schedule: str | None
    times: list[datetime]
    note: str | None


class SchedulePreview(BaseModel):
    """What a schedule text means: in words, and the first due times of a task created now."""

    schedule: str
    words: str
    times: list[datetime]
    note: str | None


class Cancelled(BaseModel):
    """Whether a running execution was asked to stop (false: it was not running)."""

    cancelled: bool
    task: Task


class Deleted(BaseModel):
    """The name of the deleted task."""

    deleted: str


class BulkFailure(BaseModel):
    """A task a bulk operation could not change, and why."""

    name: str
    error: str
    message: str


class BulkResult(BaseModel):
    """The tasks a bulk operation changed, and those it could not."""

    done: list[str]
    failed: list[BulkFailure]


class Health(BaseModel):
    """Whether the dashboard reaches the database and its table."""

    ok: bool
    db_now: datetime | None
    tasks: int | None = Field(
        description="the tasks in the table, counted up to 10,000 (see tasks_exact)")
    tasks_exact: bool | None = Field(
        default=None, description="false when there are more than 10,000 tasks: then "
        "tasks is 10,001, a lower bound (the count costs the same whatever the table's size)")
    reason: str | None


class RescheduleBody(BaseModel):
    """The new due time, ISO 8601 with an offset (``2026-03-29T03:00:00Z``)."""

    model_config = ConfigDict(extra="forbid")
    at: AwareDatetime


class ScheduleBody(BaseModel):
    """A runtime task, as :meth:`Client.schedule` takes it; the schedule as stored text."""

    model_config = ConfigDict(extra="forbid")
    handler: str = Field(description="the handler that runs it (any node that has it)",
                         examples=["send-report"])
    schedule: str = Field(
        description="'cron <expr> [<tz>]' (UTC without one), 'fixed-rate <duration>', "
                    "'fixed-delay <duration>' (30s, 5m, 1h, 1d, 1h30m or seconds) or "
                    "'once <ISO 8601>' (what the task's `schedule` field shows)",
        examples=["cron 0 8 * * 1-5 Europe/Berlin"])
    data: Any = Field(default=None, description="JSON the handler receives as ctx.data")
    options: dict[str, Any] = Field(default_factory=dict,
                                    description="execution options (priority, group, …)")


class BulkBody(BaseModel):
    """Which tasks: ``names``, or a filter (``state`` and/or ``q``) as in the listing."""

    model_config = ConfigDict(extra="forbid")
    names: list[str] | None = Field(default=None, max_length=10_000)
    state: Literal["running", "paused", "failing", "overdue", "idle"] | None = None
    q: str | None = None

    @model_validator(mode="after")
    def _one_way(self) -> BulkBody:
        if self.names is None and self.state is None and self.q is None:
            raise ValueError("give names, or a state and/or q filter")
        if self.names is not None and (self.state is not None or self.q is not None):
            raise ValueError("give names or a filter (state, q), not both")
        return self
