"""The poller: sleep until the earliest due time, pick a batch, hand it to the executor."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from .._store import Store, decode_state
from ..context import UNSET, TaskContext
from ..errors import SchemaMissing
from ..listeners import Listeners
from ..logfields import about, engine_log, engine_thread
from ..table import RESERVED_PREFIX
from .clock import Clock
from .execution import Ended, Execution, describe_error
from .executor import Executor
from .faults import FaultLog
from .fencing import Fence
from .finisher import Finisher
from .heartbeat import Heartbeat, safety_margin
from .options import check_tag, misfired
from .recovery import Recovery
from .runtime import Handlers
from .trace_links import for_token
from .unreadable import UNREADABLE_TIME, Episodes, UnreadableRow
from .wakeup import Wakeup

log = engine_log("dbscheduler.poller")

CONTENDED_RETRY = 0.005
"""A row was due but another node took it first: look again this soon."""
GIVEN_BACK_PAUSE = 0.1
"""A pick gave its rows back (their group was over its limit): look again after a random
pause of up to this many seconds."""
FINISH_BACKLOG = 4
"""The poller picks no more while this many times ``max_workers`` ended executions wait for
their finish to be written: a node whose picks outrun its finishes (a backlog of one-off jobs,
each finish its own delete) would hold ever more leases its heartbeat must keep, until they
expire and the jobs run again elsewhere."""
GATHER_WAIT = 0.005
"""Rows are due but fewer than half of the workers are free: wait at most this long for more
to free before picking."""


class Poller:
    """One thread per node. Idle, it costs one small query per ``poll_interval``."""

    def __init__(
        self,
        *,
        store: Store,
        node_id: str,
        lease: timedelta,
        poll_interval: timedelta,
        tasks: Handlers,
        executor: Executor,
        heartbeat: Heartbeat,
        listeners: Listeners,
        wakeup: Wakeup,
        clock: Clock,
        finisher: Finisher,
        recovery: Recovery,
        reregister: Callable[[], None] = lambda: None,
        ahead: float = 0.0,
    ) -> None:
        self._finisher = finisher
        self._recovery = recovery
        self._reregister = reregister
        self._table_missing = False
        self._store = store
        self._node_id = node_id
        self._lease = lease
        self._poll_interval = poll_interval.total_seconds()
        self._tasks = tasks
        self._executor = executor
        self._heartbeat = heartbeat
        self._listeners = listeners
        self._wakeup = wakeup
        self._clock = clock
        self._stop = threading.Event()
        self._faults = FaultLog(log, "polling")
        self._clock_faults = FaultLog(log, "measuring the database clock offset")
        self._last_poll = float("-inf")
        self.last_poll_at: float | None = None  # monotonic time of the last poll; for health()
        self._next_due: datetime | None = None
        self._next_due_known = False
        self._margin = safety_margin(lease)
        # A pick also takes the rows due within ``ahead`` seconds (the dialect's batch window);
        # they start at their due time from memory, so a load spread over time is picked a few
        # dozen rows per statement. A row held by another node is never taken ahead of its
        # lease's end.
        self._ahead = ahead
        self._gather_until: float | None = None
        self._unreadable = Episodes()
        self._thread = engine_thread(self._run, "dbscheduler-poller")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wakeup.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        backoff = self._poll_interval
        while not self._stop.is_set():
            try:
                timeout = self._step()
                self._faults.ok()
                backoff = self._poll_interval
            except Exception as exc:
                if isinstance(exc, SchemaMissing):
                    self._table_missing = True
                self._faults.failed(exc)
                self._listeners.on_poll_error(exc)
                timeout = backoff
                backoff = next_backoff(backoff, self._poll_interval, self._lease)
            if timeout > 0 and not self._stop.is_set():
                self._wakeup.wait(timeout)

    def _poll(self) -> datetime:
        """The full poll: next due time, table shape, clock offset. Returns db now."""
        before = time.monotonic()
        state = self._store.poll(self._tasks.names())
        self._last_poll = time.monotonic()
        self.last_poll_at = self._last_poll
        if self._table_missing or (state.shape is not None and state.shape[0] == 0
                                   and self._tasks.tasks):
            # The table is back after it was dropped, or it is empty while this node declares
            # tasks (recreated, or every row deleted): insert this node's rows again, or its
            # tasks would never run until a restart.
            log.warning("the rows of this node's tasks are missing (the table was dropped, "
                        "recreated or emptied); registering its %d task(s) again",
                        sum(1 for n in self._tasks.tasks if not n.startswith(RESERVED_PREFIX)))
            self._reregister()
            self._table_missing = False
            state = self._store.poll(self._tasks.names())
        self._next_due, self._next_due_known = state.next_due, True
        try:
            self._clock.observe(state.db_now,
                                state.sent if state.sent is not None else before,
                                state.received if state.received is not None
                                else self._last_poll)
        except Exception as exc:  # only informs sleeping and display: never worth a pick
            self._clock_faults.failed(exc)
        else:
            self._clock_faults.ok()
        return state.db_now

    def _step(self) -> float:
        """Find the next due time (from a poll, or from what this node knows), pick if due;
        return how long to sleep.

        A full poll runs after anything only a poll can tell (a trigger, a NOTIFY, a
        contended pick) and at least every ``poll_interval``; in between, the next due time
        comes from the pick itself (PostgreSQL) and from the finishes this node wrote.
        """
        # Set before the free workers are counted: a worker that frees after the count
        # wakes this poller.
        self._wakeup.wants_free(True)
        stale, hint = self._wakeup.take()
        if hint is not None and self._next_due_known:
            self._next_due = hint if self._next_due is None else min(self._next_due, hint)
        since_poll = time.monotonic() - self._last_poll
        if stale or not self._next_due_known or since_poll >= self._poll_interval:
            now = self._poll()
            since_poll = 0.0
        else:
            now = self._clock.db_now()
        until_poll = self._poll_interval - since_poll
        free = self._room()
        if free <= 0:
            return until_poll  # a worker that becomes free, or a finish written, wakes us
        if self._next_due is None:
            self._wakeup.wants_free(False)
            return until_poll
        wait = (self._next_due - now).total_seconds()
        if wait > 0:
            self._wakeup.wants_free(False)
            return min(wait, until_poll)
        if self._stop.is_set():
            return 0
        gather = self._gather(free)
        if gather > 0:
            return gather
        known = self._tasks.names()
        sent = time.monotonic()
        picked = self._store.pick(self._node_id, free, self._lease, known, self._in_flight(sent),
                                  ahead=self._ahead)
        received = time.monotonic()
        rows = picked.rows
        self._listeners.on_pick(free, len(rows))
        self._next_due, self._next_due_known = picked.next_due, picked.next_due_known
        if rows and time.monotonic() - sent >= self._lease.total_seconds() - self._margin:
            # The answer came so late that the leases it granted may already have expired
            # and been taken by another node: running them could overlap. Give them back as
            # they were (a lost execution among them stays to be recorded).
            log.warning("a pick took longer than the lease (%.1f s); giving its %d row(s) back "
                        "as they were",
                        time.monotonic() - sent, len(rows))
            self._store.give_back(self._node_id, rows)
            return 0
        ready: list[Execution] = []
        for row in rows:
            # One row that cannot be handed over must not strand the rest of the pick: they
            # are leased already, and nobody else may run them until the leases expire.
            try:
                execution = self._dispatch(row, sent, received)
            except Exception as exc:
                log.error("could not start the picked execution: %s; giving its lease back",
                          describe_error(exc), exc_info=exc,
                          extra=about(row["queue_name"], int(row["total_attempt"])))
                self._give_back(row)
            else:
                if execution is not None:
                    ready.append(execution)
        # The whole pick at once: one lock for the executor's books, not one per row.
        self._executor.submit_many(ready)
        # Picked none although a row was due: another node won it; poll again very soon
        # rather than spinning. Otherwise go round at once: the next due time is known, or
        # the next step polls for it.
        if not rows:
            self._next_due_known = False
            if picked.given_back:
                # Nodes that gave back together pick again at different moments.
                return random.uniform(GIVEN_BACK_PAUSE / 2, GIVEN_BACK_PAUSE)
            # While this node's database clock reads ahead of the others', a held row looks
            # due for up to the takeover margin before the pick may take it: look again at a
            # tenth of the margin rather than every few milliseconds.
            return max(CONTENDED_RETRY, self._store.takeover_margin / 10)
        return 0

    def _room(self) -> int:
        """How many rows a pick may take now: the free workers, fewer while the finishes not
        yet written near :data:`FINISH_BACKLOG` times ``max_workers``."""
        waiting = FINISH_BACKLOG * self._executor.max_workers - self._finisher.backlog
        return min(self._executor.free, waiting)

    def _gather(self, free: int) -> float:
        """How long to wait before picking for ``free`` workers while rows are due: 0, or
        (fewer than half free) until more free, at most :data:`GATHER_WAIT`.

        A node draining a backlog of short executions otherwise settles into pairs of picks
        (31 and 1, or 20 and 12: one for the workers that just freed, one for those that
        were still finishing), each a full round trip; gathered, one pick fills them all.
        Each freed worker wakes the poller, which looks again.
        """
        if free * 2 >= self._executor.max_workers:
            self._gather_until = None
            return 0
        now = time.monotonic()
        if self._gather_until is None:
            self._gather_until = now + GATHER_WAIT
        if now < self._gather_until:
            return self._gather_until - now
        self._gather_until = None
        return 0

    def _in_flight(self, now: float) -> set[int]:
        """Rows whose execution is still here (running, or its finish not yet written) and
        whose lease may have run out: this node must not pick them again — after an outage
        its own finish is on the way. Other nodes may (that is a real takeover). Usually
        empty, so the pick statement usually carries no extra condition."""
        held = [*self._executor.running(), *self._finisher.unwritten()]
        return {ex.id for ex in held if ex.lease_lost or now >= ex.lease_until - ex.margin}

    def _give_back(self, row: Mapping[str, Any]) -> None:
        try:
            self._store.release(self._node_id, {int(row["id"]): int(row["total_attempt"])})
        except Exception as exc:  # the lease expires on its own
            log.warning("could not give its lease back: %s", exc,
                        extra=about(row["queue_name"], int(row["total_attempt"])))

    def _dispatch(self, row: Mapping[str, Any], sent: float, received: float) -> Execution | None:
        """The execution to run for a picked row (tracked by the heartbeat already), or
        ``None`` when it ends without running (its finish is on its way)."""
        prepared = prepare(self._tasks, row, self._node_id, self._recovery,
                           self._store.table_name, lease=self._lease)
        if prepared is None:
            return None
        execution, problem = prepared
        # The database set the lease after the pick was sent: it surely ends after this.
        execution.lease_until = sent + self._lease.total_seconds()
        execution.margin = self._margin
        # Picked ahead: wait out what was left to its due time when the database picked it,
        # counted from the answer (the pick ran before it), so it never starts early by the
        # database's clock.
        early = (row["last_started_at"] - row["heartbeat_at"]).total_seconds()
        if early > 0:
            execution.not_before = received + early
        self._heartbeat.track(execution)
        if problem is not None:
            # Only this execution fails, through the normal fenced finish (its lease is not
            # left hanging, and giving it back would have it picked again at once); the
            # stored values stay as they are for someone to look at.
            self._finisher.put(self._unreadable.failed(execution, problem))
            return None
        self._unreadable.readable(execution.task.name, execution.token)
        ctx = execution.ctx
        if misfired(execution.task.options, ctx.scheduled_at, ctx.started_at):
            self._finisher.put(skipped(execution))
            return None
        return execution


def prepare(
    tasks: Handlers, row: Mapping[str, Any], node_id: str, recovery: Recovery, table: str,
    *, lease: timedelta | None = None,
) -> tuple[Execution, UnreadableRow | None] | None:
    """The execution for a picked row, and the column that cannot be read (if one cannot:
    then the execution must fail without running, see :mod:`dbscheduler._engine.unreadable`).

    ``None`` when the row was held by a vanished node and its lost execution's failure
    settings put it back to a later time.
    """
    now: datetime = row["last_started_at"]
    scheduled_at: datetime = row["prev_next_process_at"]
    id_, token = int(row["id"]), int(row["total_attempt"])  # the pick's own arithmetic
    problem: UnreadableRow | None = None
    try:
        task = tasks.for_row(row)
    except UnreadableRow as exc:
        task, problem = tasks.stand_in(row), exc
    # SQLite keeps text in an INTEGER column; the pick's "attempt + 1" reads it as 0.
    attempt, bad = _count(row, "attempt", 1)
    reenqueue_attempt, bad_reenqueue = _count(row, "reenqueue_attempt", 0)
    problem = problem or bad or bad_reenqueue
    if scheduled_at == UNREADABLE_TIME:
        scheduled_at = now  # not year 1 in the run history, the metrics, the listeners
        problem = problem or UnreadableRow(
            "next_process_at", "the stored time cannot be represented (a zero date, "
            "-infinity or text that is no time); the finish writes a readable one")
    problem = problem or _control_problem(row)
    if row["prev_locked_by"] is not None and problem is None:
        decision = recovery.recover(task, row)
        if decision is None:
            return None
        scheduled_at, attempt = decision
    state: Any = None
    data: Any = None
    if problem is None:
        try:
            state = decode_state(row["payload"])
        except Exception as exc:  # not JSON, or nested too deep (RecursionError)
            problem = UnreadableRow(
                "payload", f"stored state cannot be decoded: {describe_error(exc)}")
    if problem is None:
        try:
            data = decode_state(row.get("data"))
        except Exception as exc:
            problem = UnreadableRow(
                "data", f"stored data cannot be decoded: {describe_error(exc)}")
    ctx = TaskContext(
        name=task.name,
        node_id=node_id,
        attempt=attempt,
        reenqueue_attempt=reenqueue_attempt,
        total_attempt=token,
        scheduled_at=min(scheduled_at, now),
        started_at=now,
        created_at=row["created_at"],
        state=state,
        data=data,
        fence=Fence(table, id_, token, node_id, task.name, claim=row.get("claim"),
                    **({} if lease is None else {"lease": lease.total_seconds()})),
        triggered_by=for_token(row.get("trigger_link"), token),
    )
    return Execution(task, ctx, id_, token), problem


def _count(row: Mapping[str, Any], column: str, instead: int) -> tuple[int, UnreadableRow | None]:
    """The counter ``column`` of ``row``, or ``instead`` and why it cannot be read."""
    value = row[column]
    try:
        return int(value), None
    except (TypeError, ValueError):
        return instead, UnreadableRow(column, f"{value!r} is not an integer")


def _control_problem(row: Mapping[str, Any]) -> UnreadableRow | None:
    """What is wrong with the row's ``priority`` or ``task_group`` (a hand edit: the engine
    writes them checked), if anything."""
    priority = row.get("priority", 0)
    if isinstance(priority, (str, bytes)):  # only SQLite can hold one: elsewhere a number
        return UnreadableRow("priority", f"{priority!r} is not an integer")
    group = row.get("task_group")
    if group is not None and group not in _GOOD_GROUPS:
        try:
            check_tag(group, "group", "stored")
        except ValueError as exc:
            return UnreadableRow("task_group", str(exc))
        if len(_GOOD_GROUPS) > 10_000:
            _GOOD_GROUPS.clear()
        _GOOD_GROUPS.add(group)
    return None


_GOOD_GROUPS: set[str] = set()
"""Group names already checked: checking one character by character costs a fifth of
preparing its row, for every grouped row picked."""


def skipped(execution: Execution) -> Ended:
    """How a ``misfire="skip"`` execution picked too late ends: ``skipped``, without running;
    the task moves on to its next time."""
    ctx = execution.ctx
    late = (ctx.started_at - ctx.scheduled_at).total_seconds()
    log.info("picked %.1f s after its due time, more than its grace of %s s; skipped "
             "(misfire='skip')", late, execution.task.options.grace.total_seconds(),
             extra=about(ctx.name, ctx.total_attempt))
    return Ended(execution, "skipped", None, UNSET, None, time.monotonic())


def next_backoff(backoff: float, poll_interval: float, lease: timedelta) -> float:
    """The wait after another failed poll: doubling, up to 10 s — and a third of the lease, so
    that a node whose database comes back (a failover, a Galera node rejoining) polls again
    well within a lease instead of up to 10 s later — but never below the poll interval.

    >>> [next_backoff(b, 0.5, timedelta(seconds=3)) for b in (0.5, 1.0, 2.0)]
    [1.0, 1.0, 1.0]
    >>> next_backoff(8.0, 1.0, timedelta(seconds=30))
    10.0
    """
    cap = min(10.0, lease.total_seconds() / 3)
    return min(backoff * 2, max(poll_interval, cap))
