"""Every statement the engine and the operations run, as short transactions via the dialect.

Nothing here knows about threads; nothing above this module writes SQL. Every write made on
behalf of a running execution is *fenced*: it carries ``id``, the fencing token
(``total_attempt`` after the pick) and ``locked_by``, so a node that lost its lease can never
overwrite a row another node now owns.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.sql.elements import ColumnElement

from .context import UNSET, Status, TaskInfo, _Unset
from .dialects import Dialect, PickedRow, db_now, db_now_plus, dialect_for
from .errors import SchemaMismatch, SchemaMissing, TaskNotFound, TaskRunning
from .table import COLUMNS, MAX_NAME_LENGTH, make_table, split_table_name, to_utc

__all__ = ["FinishWrite", "Picked", "PollState", "Registration", "Store"]

log = logging.getLogger("dbscheduler.store")

_T = TypeVar("_T")

TRANSIENT_RETRIES = 3
"""Attempts of a statement that fails on a deadlock or serialization failure."""

SHAPE_CHECK_INTERVAL = 1.0
"""Seconds between two checks of the table's shape (count, max id) by one node."""

_CHUNK = 500
"""Rows per statement where a statement names rows one by one (heartbeats, stale checks)."""


@dataclass(frozen=True)
class Registration:
    """A task to insert if absent: its name, schedule text and first due time given db now."""

    name: str
    schedule: str
    first_run: Callable[[datetime], datetime]


@dataclass(frozen=True)
class PollState:
    """What one cheap query tells the poller: the time, the next due time, the table's shape."""

    db_now: datetime
    next_due: datetime | None
    """Earliest ``next_process_at`` among unpaused rows this node may pick, if any."""
    shape: tuple[int, int | None] | None
    """``(count, max id)``, when checked: changes whenever a row is added or deleted."""


@dataclass(frozen=True)
class Picked:
    """What a pick took, and — where the backend tells it in the same round trip — when the
    next row this node may pick is due (``next_due_known``; ``next_due`` None: none is)."""

    rows: list[PickedRow]
    next_due: datetime | None = None
    next_due_known: bool = False


@dataclass(frozen=True)
class FinishWrite:
    """The fenced write that ends one execution (DESIGN §3.4)."""

    id: int
    token: int
    status: Status
    next_at: datetime
    attempt: int
    finished_at: datetime
    error: str | None = None
    """Written to ``last_error`` when set; a success keeps the last failure's text."""
    payload: str | _Unset | None = UNSET
    """New JSON state; ``UNSET`` keeps the stored one."""


@dataclass
class _NameCache:
    """The names present in the table, to decide how the pick filters by name (DESIGN §8)."""

    shape: tuple[int, int | None] | None = None
    names: frozenset[str] = field(default_factory=frozenset)


class Store:
    """The scheduler table on one database, reached through one SQLAlchemy engine.

    >>> store = Store(sa.create_engine("sqlite://"), "scheduled_tasks")  # doctest: +SKIP
    >>> store.create_table(); store.tasks()                              # doctest: +SKIP
    []
    """

    def __init__(self, engine: Engine, table: str = "scheduled_tasks") -> None:
        split_table_name(table)
        self.engine = engine
        self.table_name = table
        self.table = make_table(table)
        self.dialect: Dialect = dialect_for(engine)
        name = split_table_name(table)[1]
        self.channel = f"dbscheduler_{name}"[:63]
        self._names = _NameCache()
        self._shape_checked = float("-inf")

    # -- schema --------------------------------------------------------------------------
    def create_table(self) -> None:
        """Create or upgrade the table through the migrations (the embedded default's zero
        set-up), so that a later ``dbscheduler migrate`` finds it at its version."""
        from .migrate import upgrade  # Alembic is only needed here

        schema, name = split_table_name(self.table_name)
        if sa.inspect(self.engine).has_table(name, schema=schema):
            return  # made by hand or an older version: check_schema() judges it
        upgrade(self.engine, self.table_name)

    def check_schema(self) -> None:
        """Raise :class:`SchemaMissing` / :class:`SchemaMismatch` unless the table is usable."""
        schema, name = split_table_name(self.table_name)
        inspector = sa.inspect(self.engine)
        if not inspector.has_table(name, schema=schema):
            raise SchemaMissing(self.table_name, self._safe_url())
        present = {c["name"].lower() for c in inspector.get_columns(name, schema=schema)}
        missing = [c for c in COLUMNS if c not in present]
        if missing:
            raise SchemaMismatch(self.table_name, missing)

    def _safe_url(self) -> str:
        return self.engine.url.render_as_string(hide_password=True)

    @contextmanager
    def _begin(self) -> Iterator[Connection]:
        """A read-write transaction, committed at the end."""
        try:
            with self.engine.begin() as conn:
                yield conn
        except sa.exc.DBAPIError as exc:
            if self.dialect.is_missing_table(exc):
                raise SchemaMissing(self.table_name, self._safe_url()) from exc
            raise

    def _retrying(self, what: str, action: Callable[[], _T]) -> _T:
        """Run ``action``; again at once after a deadlock or serialization failure."""
        for attempt in range(1, TRANSIENT_RETRIES + 1):
            try:
                return action()
            except sa.exc.DBAPIError as exc:
                if attempt == TRANSIENT_RETRIES or not self.dialect.is_transient(exc):
                    raise
                log.debug("%s: transient error, retrying: %s", what, exc.orig)
        raise AssertionError("unreachable")

    @contextmanager
    def _autocommit(self) -> Iterator[Connection]:
        """A server connection whose every statement commits on its own."""
        with self.engine.connect() as conn:
            yield conn.execution_options(isolation_level="AUTOCOMMIT")

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        """A connection for reads only (autocommit on servers: one round trip per query)."""
        try:
            with self.engine.connect() as conn:
                yield conn.execution_options(**self.dialect.read_options)
        except sa.exc.DBAPIError as exc:
            if self.dialect.is_missing_table(exc):
                raise SchemaMissing(self.table_name, self._safe_url()) from exc
            raise

    # -- registration --------------------------------------------------------------------
    def register(self, items: Sequence[Registration]) -> None:
        """Insert each task unless present; apply a changed schedule at once (DESIGN §3.1).

        A row that exists keeps its state; when its ``schedule`` text differs, its next time is
        recomputed from the new schedule unless it is running, and the text updated.
        """
        self._retrying("registration", lambda: self._register(items))

    def _register(self, items: Sequence[Registration]) -> None:
        t, b = self.table, sa.bindparam
        # One order on every node: racing registrations lock rows in the same sequence.
        ordered = sorted(items, key=lambda i: i.name)
        with self._begin() as conn:
            now = self._now(conn)
            first = {item.name: item.first_run(now) for item in ordered}
            present = {
                r.queue_name: r.schedule
                for r in conn.execute(sa.select(t.c.queue_name, t.c.schedule))
            }
            missing = [item for item in ordered if item.name not in present]
            if missing:
                self.dialect.insert_many_if_absent(conn, t, [
                    {
                        "queue_name": item.name,
                        "payload": None,
                        "created_at": now,
                        "next_process_at": first[item.name],
                        "attempt": 0,
                        "reenqueue_attempt": 0,
                        "total_attempt": 0,
                        "paused": False,
                        "schedule": item.schedule,
                        "stop_requested": False,
                    }
                    for item in missing
                ])
            # Rows another node inserted meanwhile are checked too: the statement itself only
            # touches rows whose schedule text differs.
            check = [i for i in ordered if i.name not in present or present[i.name] != i.schedule]
            if check:
                idle = t.c.locked_by.is_(None)
                changed = conn.execute(
                    sa.update(t)
                    .where(
                        t.c.queue_name == b("r_name", type_=t.c.queue_name.type),
                        sa.or_(t.c.schedule.is_(None),
                               t.c.schedule != b("r_schedule", type_=t.c.schedule.type)),
                    )
                    .values(
                        schedule=b("r_schedule", type_=t.c.schedule.type),
                        next_process_at=sa.case(
                            (idle, b("r_first", type_=t.c.next_process_at.type)),
                            else_=t.c.next_process_at,
                        ),
                        attempt=sa.case((idle, 0), else_=t.c.attempt),
                    ),
                    [{"r_name": i.name, "r_schedule": i.schedule, "r_first": first[i.name]}
                     for i in check],
                ).rowcount
                if changed and changed > 0:
                    log.info("%d task(s) registered with a changed schedule: %s", changed,
                             ", ".join(repr(i.name) for i in check if i.name in present))
            if items and self.dialect.supports_notify:
                self.dialect.notify(conn, self.channel, "")

    # -- the poll ------------------------------------------------------------------------
    def poll(self, known: Collection[str]) -> PollState:
        """One small query: database time, next due time of this node's tasks, table shape."""
        t = self.table
        # Counting the table costs a scan: a busy node checks its shape once a second, not on
        # every one of its hundreds of polls a second. An idle node checks it on every poll.
        check_shape = time.monotonic() - self._shape_checked >= SHAPE_CHECK_INTERVAL
        with self._read() as conn:
            where = self._name_filter(conn, known)
            due = sa.select(sa.func.min(t.c.next_process_at)).where(
                t.c.paused == False,  # noqa: E712
                *([where] if where is not None else []),
            )
            columns = [db_now().label("now"), due.scalar_subquery().label("next_due")]
            if check_shape:
                columns += [
                    sa.select(sa.func.count()).select_from(t).scalar_subquery().label("n"),
                    sa.select(sa.func.max(t.c.id)).scalar_subquery().label("max_id"),
                ]
            row = conn.execute(sa.select(*columns)).one()
        now = to_utc(row.now)
        assert now is not None
        shape = (int(row.n), row.max_id) if check_shape else None
        if shape is not None:
            self._shape_checked = time.monotonic()
            if shape != self._names.shape:
                self._names.shape = None  # refreshed by the next filter
        return PollState(now, to_utc(row.next_due), shape)

    def _name_filter(self, conn: Connection, known: Collection[str]) -> ColumnElement[bool] | None:
        """How to restrict picks to ``known`` names as cheaply as the table allows (DESIGN §8).

        ``None`` when every row is known (the usual case: all nodes run the same code);
        otherwise ``IN`` the known names or ``NOT IN`` the unknown ones, whichever is shorter.
        """
        t = self.table
        if self._names.shape is None:
            rows = conn.execute(sa.select(t.c.queue_name, t.c.id)).all()
            self._names.names = frozenset(r.queue_name for r in rows)
            self._names.shape = (len(rows), max((r.id for r in rows), default=None))
        unknown = self._names.names.difference(known)
        if not unknown:
            return None
        if len(unknown) < len(known):
            return sa.not_(self.dialect.names_in(t.c.queue_name, sorted(unknown)))
        return self.dialect.names_in(t.c.queue_name, sorted(known))

    # -- the pick ------------------------------------------------------------------------
    def pick(
        self,
        node_id: str,
        limit: int,
        lease: timedelta,
        known: Collection[str],
        exclude: Collection[int] = (),
    ) -> Picked:
        """Take up to ``limit`` due, unpaused rows among ``known`` names (DESIGN §3.2),
        except the rows ``exclude`` (ids whose execution this node still has in flight)."""
        if limit <= 0:
            return Picked([])
        rows = self._retrying(
            "pick", lambda: self._pick(node_id, limit, lease, known, exclude)
        )
        if rows and "next_due" in rows[0] and len(rows) < limit:
            # Fewer rows than asked: every due row was taken, so the backend's "earliest
            # later row" is this node's next due time.
            return Picked(rows, to_utc(rows[0]["next_due"]), True)
        return Picked(rows)

    def _pick(
        self,
        node_id: str,
        limit: int,
        lease: timedelta,
        known: Collection[str],
        exclude: Collection[int],
    ) -> list[PickedRow]:
        single = self.dialect.single_statement_pick
        for _ in range(2):
            with self._autocommit() if single else self._begin() as conn:
                name_filter = self._name_filter(conn, known)
                where = self.table.c.paused == False  # noqa: E712
                if name_filter is not None:
                    where = sa.and_(where, name_filter)
                if exclude:
                    where = sa.and_(where, self.table.c.id.not_in(sorted(exclude)))
                rows = self.dialect.pick(
                    conn, self.table, where=where, limit=limit, lease=lease, node_id=node_id
                )
                strangers = [r for r in rows if r["queue_name"] not in known]
                if not strangers:
                    return rows
                # A row was added since the names were read (another node's new task): give it
                # back as it was, and filter by name from now on.
                self._names.shape = None
                if not single:
                    conn.rollback()
                    continue
                self._unpick(conn, node_id, strangers)
                return [
                    {k: v for k, v in r.items() if k != "next_due"}  # the filter was wrong
                    for r in rows
                    if r["queue_name"] in known
                ]
        return []

    def _unpick(self, conn: Connection, node_id: str, rows: Sequence[PickedRow]) -> None:
        """Undo a committed pick of rows this node cannot run (fenced by the pick's token)."""
        t, b = self.table, sa.bindparam
        conn.execute(
            sa.update(t)
            .where(t.c.id == b("u_id"), t.c.total_attempt == b("u_token"),
                   t.c.locked_by == node_id)
            .values(
                locked_by=b("u_locked_by", type_=t.c.locked_by.type),
                next_process_at=b("u_next", type_=t.c.next_process_at.type),
                last_started_at=b("u_started", type_=t.c.last_started_at.type),
                attempt=t.c.attempt - 1,
            ),
            [
                {
                    "u_id": r["id"],
                    "u_token": r["total_attempt"],
                    "u_locked_by": r["prev_locked_by"],
                    "u_next": r["prev_next_process_at"],
                    "u_started": r["prev_last_started_at"],
                }
                for r in rows
            ],
        )

    # -- fenced writes of running executions ---------------------------------------------
    def _fence(self, node_id: str, id_: Any, token: Any) -> ColumnElement[bool]:
        t = self.table
        return sa.and_(t.c.id == id_, t.c.total_attempt == token, t.c.locked_by == node_id)

    def heartbeat(
        self, node_id: str, lease: timedelta, tokens: Mapping[int, int]
    ) -> tuple[set[int], set[int]]:
        """Extend the lease of every execution in ``tokens`` (``id -> token``) in one statement.

        Returns ``(alive, stop_requested)``: the ids still owned by this node, and those of
        them whose cancel was requested. An id missing from ``alive`` has lost its lease.
        """
        if not tokens:
            return set(), set()
        return self._retrying("heartbeat", lambda: self._heartbeat(node_id, lease, tokens))

    def _heartbeat(
        self, node_id: str, lease: timedelta, tokens: Mapping[int, int]
    ) -> tuple[set[int], set[int]]:
        t = self.table
        ids = list(tokens)
        rows: list[Any] = []
        with self._begin() as conn:
            # Chunks keep every statement under SQL Server's 2,100 parameters and Oracle's
            # 1,000-item IN lists, however many executions a node runs.
            for start in range(0, len(ids), _CHUNK):
                chunk = ids[start : start + _CHUNK]
                fences = [self._fence(node_id, i, tokens[i]) for i in chunk]
                conn.execute(
                    sa.update(t)
                    .where(sa.or_(*fences))
                    .values(
                        next_process_at=db_now_plus(lease.total_seconds()), heartbeat_at=db_now()
                    )
                )
                rows += conn.execute(
                    sa.select(t.c.id, t.c.total_attempt, t.c.locked_by, t.c.stop_requested).where(
                        t.c.id.in_(chunk)
                    )
                ).all()
        alive = {r.id for r in rows if r.locked_by == node_id and r.total_attempt == tokens[r.id]}
        stop = {r.id for r in rows if r.id in alive and r.stop_requested}
        return alive, stop

    def finish(
        self,
        node_id: str,
        make_writes: Callable[[datetime], Sequence[FinishWrite]],
        notify_within: timedelta = timedelta(seconds=1),
    ) -> tuple[datetime, list[FinishWrite]]:
        """Write finished executions in one transaction, fenced; returns (db now, stale writes).

        ``make_writes`` receives the database time (the finish time) and returns the writes;
        a write whose token moved on (another node owns the row) changes nothing. Sleeping
        nodes are notified when a new due time comes within ``notify_within`` (their poll
        interval): anything later, their next poll sees in time.
        """
        return self._retrying(
            "finish", lambda: self._finish(node_id, make_writes, notify_within)
        )

    def _finish(
        self,
        node_id: str,
        make_writes: Callable[[datetime], Sequence[FinishWrite]],
        notify_within: timedelta,
    ) -> tuple[datetime, list[FinishWrite]]:
        with self._begin() as conn:
            now = self._now(conn)
            writes = list(make_writes(now))
            if not writes:
                return now, []
            # Two statement shapes (with and without new state): each group is one executemany.
            landed = 0
            for with_payload in (False, True):
                group = [w for w in writes if isinstance(w.payload, _Unset) != with_payload]
                if group:
                    landed += conn.execute(
                        self._finish_stmt(node_id, with_payload),
                        [_finish_params(w) for w in group],
                    ).rowcount
            if conn.dialect.supports_sane_multi_rowcount and landed == len(writes):
                stale = []
            else:
                stale = self._stale(conn, writes)
            soon = now + notify_within
            if self.dialect.supports_notify and any(w.next_at <= soon for w in writes):
                # The next occurrence is due before the peers' next poll (FixedDelay(0), a
                # retry): wake them.
                self.dialect.notify(conn, self.channel, "")
        return now, stale

    def _finish_stmt(self, node_id: str, with_payload: bool) -> sa.Update:
        t, b = self.table, sa.bindparam
        stmt = (
            sa.update(t)
            .where(t.c.id == b("w_id"), t.c.total_attempt == b("w_token"),
                   t.c.locked_by == node_id)
            .values(
                locked_by=None,
                next_process_at=b("w_next", type_=t.c.next_process_at.type),
                attempt=b("w_attempt", type_=sa.Integer()),
                last_status=b("w_status", type_=t.c.last_status.type),
                last_finished_at=b("w_finished", type_=t.c.last_finished_at.type),
                stop_requested=False,
                reenqueue_attempt=t.c.reenqueue_attempt + b("w_success", type_=sa.Integer()),
                # A success keeps the last failure's text; a failure replaces it.
                last_error=sa.func.coalesce(b("w_error", type_=t.c.last_error.type),
                                            t.c.last_error),
            )
        )
        if with_payload:
            stmt = stmt.values(payload=b("w_payload", type_=t.c.payload.type))
        return stmt

    def _stale(self, conn: Connection, writes: Sequence[FinishWrite]) -> list[FinishWrite]:
        """Which writes of a batch did not land: their row does not carry what they wrote."""
        t = self.table
        ids = [w.id for w in writes]
        rows = {
            r.id: r
            for start in range(0, len(ids), _CHUNK)
            for r in conn.execute(
                sa.select(t.c.id, t.c.total_attempt, t.c.locked_by, t.c.last_finished_at).where(
                    t.c.id.in_(ids[start : start + _CHUNK])
                )
            )
        }
        return [
            w
            for w in writes
            if (row := rows.get(w.id)) is None
            or row.total_attempt != w.token
            or row.locked_by is not None
            or row.last_finished_at != w.finished_at
        ]

    def record_lost(self, node_id: str, id_: int, token: int, attempt: int, error: str) -> bool:
        """Record, on a row just picked, that its previous execution was lost, and keep it."""
        with self._begin() as conn:
            return bool(
                conn.execute(
                    sa.update(self.table)
                    .where(self._fence(node_id, id_, token))
                    .values(
                        attempt=attempt,
                        last_status="lost",
                        last_error=error,
                        last_finished_at=db_now(),
                    )
                ).rowcount
            )

    def release(self, node_id: str, tokens: Mapping[int, int]) -> int:
        """Give back leases this node still holds so another node can pick them at once."""
        if not tokens:
            return 0
        t = self.table
        with self._begin() as conn:
            count = 0
            for id_, tok in tokens.items():
                count += conn.execute(
                    sa.update(t)
                    .where(self._fence(node_id, id_, tok))
                    .values(
                        locked_by=None,
                        next_process_at=db_now(),
                        # The interrupted try was not a failure: give its attempt back.
                        attempt=sa.case((t.c.attempt > 0, t.c.attempt - 1), else_=0),
                        stop_requested=False,
                    )
                ).rowcount
            if count and self.dialect.supports_notify:
                self.dialect.notify(conn, self.channel, "")
        return count

    # -- operations ----------------------------------------------------------------------
    def db_now(self) -> datetime:
        """The database's current time, aware UTC."""
        with self._read() as conn:
            return self._now(conn)

    def _now(self, conn: Connection) -> datetime:
        value = to_utc(conn.execute(sa.select(db_now())).scalar_one())
        assert value is not None
        return value

    def _row(self, conn: Connection, name: str) -> Mapping[str, Any]:
        self._known_shape(name)
        row = conn.execute(sa.select(self.table).where(self.table.c.queue_name == name)).first()
        if row is None:
            raise TaskNotFound(name, self.table_name)
        return dict(row._mapping)

    def _known_shape(self, name: str) -> None:
        """A name that no task can have is not found (MySQL would match "a " to "a")."""
        try:
            validate_name(name)
        except ValueError:
            raise TaskNotFound(str(name), self.table_name) from None

    def _update_idle(self, name: str, what: str, **values: Any) -> None:
        """Update a task that must not be running (its next time is its lease while it runs)."""
        self._known_shape(name)
        t = self.table
        with self._begin() as conn:
            done = conn.execute(
                sa.update(t)
                .where(t.c.queue_name == name, t.c.locked_by.is_(None))
                .values(**values)
            ).rowcount
            if not done:
                row = self._row(conn, name)
                raise TaskRunning(
                    name, row["locked_by"], f"cannot {what} while it runs; try after it finishes"
                )
            if self.dialect.supports_notify:
                self.dialect.notify(conn, self.channel, name)

    def trigger(self, name: str) -> None:
        """Make the task due now (every listening node wakes at once on PostgreSQL)."""
        self._update_idle(name, "trigger it", next_process_at=db_now(), attempt=0)

    def reschedule(self, name: str, at: datetime) -> None:
        """Set the task's next due time to the aware datetime ``at``."""
        self._update_idle(name, "reschedule it", next_process_at=at, attempt=0)

    def set_paused(self, name: str, paused: bool) -> None:
        """Pause (never picked, cluster-wide) or resume a task. A running execution goes on."""
        self._known_shape(name)
        t = self.table
        with self._begin() as conn:
            if not conn.execute(
                sa.update(t).where(t.c.queue_name == name).values(paused=paused)
            ).rowcount:
                raise TaskNotFound(name, self.table_name)
            if not paused and self.dialect.supports_notify:
                self.dialect.notify(conn, self.channel, name)

    def cancel(self, name: str) -> bool:
        """Ask the running execution to stop; False (and nothing changed) when it is idle."""
        self._known_shape(name)
        t = self.table
        with self._begin() as conn:
            done = conn.execute(
                sa.update(t)
                .where(t.c.queue_name == name, t.c.locked_by.is_not(None))
                .values(stop_requested=True)
            ).rowcount
            if not done:
                self._row(conn, name)  # raises TaskNotFound
        return bool(done)

    def delete(self, name: str, force: bool = False) -> None:
        """Delete the task's row; a running task only with ``force=True``."""
        self._known_shape(name)
        t = self.table
        with self._begin() as conn:
            where = [t.c.queue_name == name]
            if not force:
                where.append(t.c.locked_by.is_(None))
            if not conn.execute(sa.delete(t).where(*where)).rowcount:
                row = self._row(conn, name)
                raise TaskRunning(
                    name, row["locked_by"],
                    "refusing to delete it; pass force=True to delete anyway",
                )

    def info(self, name: str) -> TaskInfo:
        """The task's row as a :class:`TaskInfo`."""
        with self._read() as conn:
            return _to_info(self._row(conn, name))

    def tasks(self) -> list[TaskInfo]:
        """Every row, ordered by name."""
        with self._read() as conn:
            rows = conn.execute(sa.select(self.table).order_by(self.table.c.queue_name))
            return [_to_info(dict(r._mapping)) for r in rows]


def _finish_params(write: FinishWrite) -> dict[str, Any]:
    params = {
        "w_id": write.id,
        "w_token": write.token,
        "w_next": write.next_at,
        "w_attempt": write.attempt,
        "w_status": write.status,
        "w_finished": write.finished_at,
        "w_success": 1 if write.status == "success" else 0,
        "w_error": write.error,
    }
    if not isinstance(write.payload, _Unset):
        params["w_payload"] = write.payload
    return params


def validate_name(name: object) -> str:
    """A task name: a non-empty string of at most 255 characters (any characters)."""
    if not isinstance(name, str):
        raise ValueError(f"task name must be a string, got {type(name).__name__}")
    if not name.strip():
        raise ValueError("task name must not be empty")
    if name != name.strip():
        # MySQL/MariaDB compare with trailing spaces ignored: "a " and "a" would be one row.
        raise ValueError(f"task name {name!r} must not start or end with white space")
    if "\x00" in name:
        raise ValueError(f"task name {name!r} contains a NUL character")
    # SQL Server's NVARCHAR counts UTF-16 code units: an emoji takes two.
    units = len(name.encode("utf-16-le")) // 2
    if units > MAX_NAME_LENGTH:
        raise ValueError(
            f"task name {name[:40]!r}… is {len(name)} characters ({units} UTF-16 units); "
            f"the limit is {MAX_NAME_LENGTH}"
        )
    return name


def decode_state(payload: str | None) -> Any:
    """The stored ``payload`` as Python (JSON), ``None`` when empty."""
    return None if payload is None else json.loads(payload)


def _to_info(row: Mapping[str, Any]) -> TaskInfo:
    return TaskInfo(
        id=int(row["id"]),
        name=row["queue_name"],
        state=decode_state(row["payload"]),
        created_at=row["created_at"],
        next_process_at=row["next_process_at"],
        attempt=int(row["attempt"]),
        reenqueue_attempt=int(row["reenqueue_attempt"]),
        total_attempt=int(row["total_attempt"]),
        paused=bool(row["paused"]),
        locked_by=row["locked_by"],
        heartbeat_at=row["heartbeat_at"],
        last_started_at=row["last_started_at"],
        last_finished_at=row["last_finished_at"],
        last_status=row["last_status"],
        last_error=row["last_error"],
        schedule=row["schedule"],
        stop_requested=bool(row["stop_requested"]),
    )
