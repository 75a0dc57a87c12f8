"""The operations of a :class:`~dbscheduler.Scheduler` (trigger, pause, info …): each one
delegates to the scheduler's :class:`~dbscheduler.Client` and wakes the local poller where
the change may make a task due sooner."""

from __future__ import annotations

from collections.abc import Collection, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from ._execution import Execution, TaskDef
from ._heartbeat import Heartbeat
from ._wakeup import Wakeup
from .client import Client
from .context import RunInfo, TaskInfo
from .errors import TaskNotFound
from .schedules import Schedule

__all__ = ["Operations"]


class Operations:
    """The operations half of :class:`~dbscheduler.Scheduler` (a mixin: the scheduler holds
    the attributes declared here)."""

    client: Client
    table: str
    _tasks: dict[str, TaskDef]
    _state: str
    _embedded: bool
    _schema_ready: bool
    _wakeup: Wakeup
    _heartbeat: Heartbeat | None

    def _ensure_schema(self) -> None:
        raise NotImplementedError

    def _cancelled(self, ex: Execution) -> None:
        raise NotImplementedError

    @contextmanager
    def _ops(self, name: str) -> Iterator[Client]:
        """The client, with the table made on first use (embedded default), and an unknown
        name that is registered here but not written yet explained as such."""
        if self._embedded and not self._schema_ready:
            self._ensure_schema()
        try:
            yield self.client
        except TaskNotFound as exc:
            if name in self._tasks and self._state in ("new", "starting"):
                raise TaskNotFound(
                    name, self.table,
                    "it is added to this Scheduler but its row is written by start(); "
                    "call start() first (or operate it from a started node)",
                ) from exc
            raise

    def trigger(self, name: str) -> None:
        """Make ``name`` due now; nodes listening on PostgreSQL wake at once.

        Raises :class:`TaskNotFound` for an unknown name and :class:`TaskRunning` while it
        runs (its next time is then its lease).
        """
        with self._ops(name) as client:
            client.trigger(name)
        self._wakeup.set()

    def reschedule(self, name: str, at: datetime) -> None:
        """Set the next due time of ``name`` to the aware datetime ``at``."""
        with self._ops(name) as client:
            client.reschedule(name, at)
        self._wakeup.set()

    def pause(self, name: str) -> None:
        """Never pick ``name`` again, on any node, until :meth:`resume`."""
        with self._ops(name) as client:
            client.pause(name)

    def resume(self, name: str) -> None:
        """Undo :meth:`pause`; the task runs at its stored next time (at once if past)."""
        with self._ops(name) as client:
            client.resume(name)
        self._wakeup.set()

    def cancel(self, name: str) -> bool:
        """Ask the running execution of ``name`` to stop (``ctx.stop_requested``, seen within
        one heartbeat on its node). Returns False, changing nothing, if it is not running."""
        with self._ops(name) as client:
            asked = client.cancel(name)
        if asked and self._heartbeat is not None:
            for ex in self._heartbeat.tracked():
                if ex.task.name == name:
                    self._cancelled(ex)
        return asked

    def delete(self, name: str, force: bool = False) -> None:
        """Delete the row of ``name``; refused while it runs unless ``force=True``.

        A task still registered on a running node is inserted again when a node starts.
        """
        with self._ops(name) as client:
            client.delete(name, force=force)

    def schedule(self, name: str, handler: str, schedule: Schedule, *, data: Any = None,
                 **options: Any) -> None:
        """Create or update the runtime task ``name`` (see :meth:`Client.schedule`)."""
        with self._ops(name) as client:
            client.schedule(name, handler, schedule, data=data, **options)
        self._wakeup.set()

    def schedule_once(self, name: str, handler: str, at: datetime, *, data: Any = None,
                      **options: Any) -> None:
        """A one-off job at ``at`` (see :meth:`Client.schedule_once`)."""
        with self._ops(name) as client:
            client.schedule_once(name, handler, at, data=data, **options)
        self._wakeup.set()

    def set_group_limit(self, group: str, limit: int | None) -> None:
        """At most ``limit`` executions of ``group`` at once across the cluster (see
        :meth:`Client.set_group_limit`).

        >>> scheduler.set_group_limit("reports", 2)   # doctest: +SKIP
        """
        with self._ops(group) as client:
            client.set_group_limit(group, limit)
        self._wakeup.set()

    def unschedule(self, name: str) -> bool:
        """Delete the row ``name``; False when there was none (see :meth:`Client.unschedule`)."""
        with self._ops(name) as client:
            return client.unschedule(name)

    def tasks(self) -> list[TaskInfo]:
        """A :class:`TaskInfo` for every row in the table, ordered by name."""
        with self._ops("") as client:
            return client.tasks()

    def info(self, name: str) -> TaskInfo:
        """The :class:`TaskInfo` of ``name``."""
        with self._ops(name) as client:
            return client.info(name)

    def runs(
        self,
        name: str | None = None,
        *,
        status: str | Collection[str] | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 100,
    ) -> list[RunInfo]:
        """Finished executions, newest first (see :meth:`Client.runs`).

        >>> scheduler.runs("nightly-report", status="error", limit=5)   # doctest: +SKIP
        """
        with self._ops("") as client:
            return client.runs(name, status=status, since=since, until=until, limit=limit)
