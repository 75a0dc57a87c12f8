"""The exceptions dbscheduler raises on purpose. All derive from :class:`SchedulerError`."""

from __future__ import annotations

__all__ = [
    "ChildFailed", "DatabaseUnreachable", "DeliveryFailed", "LeaseLost", "LifecycleError",
    "ListenUnavailable", "SchedulerError", "SchemaMismatch", "SchemaMissing",
    "TableManagedElsewhere", "TargetRefused", "TaskNotFound", "TaskRunning", "TooManyRuns",
    "UnreadableRow",
]


class SchedulerError(Exception):
    """Base class of every error dbscheduler raises on purpose."""


class TaskNotFound(SchedulerError, LookupError):
    """An operation named a task that has no row in the table.

    >>> try:
    ...     scheduler.trigger("no-such-task")      # doctest: +SKIP
    ... except TaskNotFound as exc:
    ...     print(exc)
    """

    def __init__(self, name: str, table: str, hint: str | None = None) -> None:
        message = f"no task named {name!r} in table {table!r}"
        super().__init__(f"{message}: {hint}" if hint else message)
        self.name = name
        self.table = table


class TaskRunning(SchedulerError):
    """The operation is refused because the task is running right now (e.g. ``delete``)."""

    def __init__(self, name: str, node: str | None, what: str) -> None:
        super().__init__(f"task {name!r} is running on node {node!r}: {what}")
        self.name = name
        self.node = node


class SchemaMissing(SchedulerError):
    """The scheduler table does not exist: run ``dbscheduler migrate`` against the database."""

    def __init__(self, table: str, url: str, part: str | None = None) -> None:
        what = f"table {table!r}" if part is None else f"table {part!r} (of {table!r})"
        super().__init__(
            f"{what} does not exist in {url}; create it with "
            f"`dbscheduler migrate --url '{url}' --table {table}` (or your own Alembic, "
            "see docs/guides/alembic.md)"
        )
        self.table = table


class SchemaMismatch(SchedulerError):
    """The table exists but lacks columns this version needs: run ``dbscheduler migrate``."""

    def __init__(self, table: str, missing: list[str]) -> None:
        cols = ", ".join(missing)
        super().__init__(
            f"table {table!r} is missing column(s) {cols}; it was not created by this version "
            "of dbscheduler: run `dbscheduler migrate` to bring it up to date"
        )
        self.table = table
        self.missing = missing


class DatabaseUnreachable(SchedulerError):
    """No connection to the database could be opened: the server is down or unknown, or it
    refused the database name, the user or the password. ``kind`` says which (``host``,
    ``starting``, ``database``, ``user``, ``password`` or ``login``)."""

    def __init__(self, url: str, kind: str, reason: str) -> None:
        super().__init__(f"cannot connect to {url}: {reason}")
        self.url = url
        self.kind = kind
        self.reason = reason


class LeaseLost(SchedulerError):
    """``ctx.fenced(...)``: this execution no longer holds its row's lease (another node took
    the task over, the row is gone, or the lease could not be confirmed before it ended), so
    its transaction was rolled back, not committed. ``reason`` says which check refused it."""

    def __init__(self, name: str, token: int, node: str, *, reason: str | None = None) -> None:
        why = f" ({reason})" if reason else ""
        super().__init__(
            f"task {name!r}: execution {token} on node {node} no longer holds its lease (another "
            f"node took the task over, or its row was deleted){why}; its fenced transaction was "
            "rolled back"
        )
        self.name = name
        self.token = token
        self.node = node
        self.reason = reason


class LifecycleError(SchedulerError, RuntimeError):
    """An object was used at a point of its life where that cannot work: a Scheduler started
    twice, or given a task after its shutdown; ``ctx.fenced()`` outside a running scheduler; a
    ``TestScheduler`` closed, or made from a Scheduler already started. Also a
    ``RuntimeError``, which these were before they had a name of their own.

    >>> scheduler.shutdown()                   # doctest: +SKIP
    >>> try:
    ...     scheduler.start()                  # doctest: +SKIP
    ... except LifecycleError as exc:          # a RuntimeError too
    ...     print(exc)
    """


class TooManyRuns(SchedulerError, RuntimeError):
    """``TestScheduler``: more executions were due at one instant than its ``max_runs``, the
    sign of a schedule that never moves on (``FixedDelay(0)``, ``Result.next_at`` in the past).
    Also a ``RuntimeError``, which it was before it had a name of its own.

    >>> with pytest.raises(TooManyRuns):   # doctest: +SKIP
    ...     harness.run_due()
    """


class TableManagedElsewhere(SchedulerError):
    """``upgrade`` (``dbscheduler migrate``) refuses a table its own version table does not
    record: the user's Alembic manages it, or it was made by hand. Creating it again would
    only fail on the existing table.

    >>> try:
    ...     upgrade(engine, "scheduled_tasks")   # doctest: +SKIP
    ... except TableManagedElsewhere as exc:
    ...     print(exc)
    """


class TargetRefused(SchedulerError):
    """The target host is not on the allow-list (the web app answers 403).

    >>> try:
    ...     client.push("k", {}, handler=HTTP_HANDLER, data=target)   # doctest: +SKIP
    ... except TargetRefused as exc:
    ...     print(exc)
    """


class DeliveryFailed(SchedulerError):
    """The target answered with a status other than 2xx.

    >>> def on_failure(ctx, error):   # a listener sees why a delivery failed
    ...     if isinstance(error, DeliveryFailed):
    ...         print(error)
    """


class ChildFailed(SchedulerError):
    """``isolation="process"``: the child process ended without a result (it crashed or was
    killed), or the function raised there; the message carries its error's text. This is the
    error the execution fails with.

    >>> str(ChildFailed("the child process was killed by SIGKILL"))
    'the child process was killed by SIGKILL'
    """


class UnreadableRow(SchedulerError, ValueError):
    """A picked row's ``column`` holds something this version cannot use (``reason``): its
    execution fails without running, and is tried again on a back-off.

    >>> str(UnreadableRow("schedule", "unknown kind 'hourly'"))
    "column schedule: unknown kind 'hourly'"
    """

    def __init__(self, column: str, reason: str) -> None:
        super().__init__(f"column {column}: {reason}")
        self.column = column
        self.reason = reason


class ListenUnavailable(SchedulerError):
    """``LISTEN`` cannot work on this engine (a pooler in front of the server): the node
    polls instead, and says so once.

    >>> str(ListenUnavailable("LISTEN needs a session: give listen_url="))
    'LISTEN needs a session: give listen_url='
    """
