"""The schema in one place: the ``scheduled_tasks`` table and the tables beside it, defined once
with SQLAlchemy Core for any validated name.

The tasks table is :func:`make_table`; beside it, one of each per tasks table,
``<table>_groups`` (group limits, :func:`make_groups_table`), ``<table>_runs`` (the run
history, :func:`make_runs_table`), ``<table>_items`` (pending batch items,
:func:`make_items_table`) and ``<table>_nodes`` (the node registry, :func:`make_nodes_table`).
The migrations, the ``ddl/*.sql`` files and the engine all build them from here, so there is
exactly one definition of each shape. How each database stores a column (timestamps in UTC
with microsecond precision, flags, names compared exactly) is the dialects' business:
:mod:`dbscheduler.dialects.types`.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import sqlalchemy as sa

from .dialects.types import (
    FalseDefault,
    Flag,
    UTCDateTime,
    id_type,
    name_type,
    state_type,
    table_options,
    text_type,
)

__all__ = [
    "COLUMNS",
    "DEFAULT_TABLE",
    "ITEM_COLUMNS",
    "MAX_ERROR_LENGTH",
    "MAX_NAME_LENGTH",
    "MAX_STATE_BYTES",
    "RESERVED_PREFIX",
    "RUN_STATUSES",
    "control_columns",
    "groups_table_name",
    "items_table_name",
    "make_groups_table",
    "make_items_table",
    "make_nodes_table",
    "make_runs_table",
    "make_table",
    "nodes_table_name",
    "runs_table_name",
    "split_table_name",
    "traceback_column",
]

DEFAULT_TABLE = "scheduled_tasks"
MAX_NAME_LENGTH = 255
"""Longest task name: the unique index must fit MySQL's and SQL Server's key size limits."""
MAX_ERROR_LENGTH = 2000
MAX_SCHEDULE_LENGTH = 500
MAX_STATE_BYTES = 1024 * 1024
"""Largest persisted state (``payload``), in bytes of UTF-8 JSON: every dialect's payload
column holds it (MySQL ``LONGTEXT``, SQL Server ``NVARCHAR(MAX)``, Oracle ``CLOB``), and a
larger state is refused before anything is written."""
CLAIM_LENGTH = 32
"""Length of the ``claim`` stamp a pick writes (a random hex value per pick statement)."""

MAX_DATA_BYTES = MAX_STATE_BYTES
"""Largest ``data`` (the JSON a runtime task's handler receives as ``ctx.data``)."""
MAX_OPTIONS_LENGTH = 2000
"""Longest ``options`` JSON text (execution options stored with a row)."""

MAX_ITEM_BYTES = MAX_STATE_BYTES
"""Largest batch item (``push``), in bytes of UTF-8 JSON."""

REVISION = 12
"""The table shape :func:`make_table` builds by default (the newest migration's)."""
RANK_INDEX_REVISION = 11
"""The revision that makes ``<name>_rank_idx`` (MySQL/MariaDB only)."""
HOT_PATH_INDEX_REVISION = 12
"""The revision that, on PostgreSQL, drops ``<name>_claim_idx`` and keeps in
``<name>_alert_idx`` only the rows with an alert: see :func:`claim_index` and
:func:`alert_index`."""

RUN_STATUSES: tuple[str, ...] = ("success", "error", "lost", "cancelled", "timeout", "skipped")
"""The values of the run history's ``status`` column."""
RESERVED_PREFIX = "dbscheduler."
"""Task and handler names starting with this belong to dbscheduler's built-in tasks."""

_IDENT = r"[A-Za-z_][A-Za-z0-9_]{0,62}"
_TABLE_NAME = re.compile(rf"^(?:({_IDENT})\.)?({_IDENT})$")


def split_table_name(qualified: str) -> tuple[str | None, str]:
    """Validate a table name and split it into ``(schema, name)``.

    Only plain identifiers are accepted (letters, digits, ``_``, at most 63 characters, with
    an optional ``schema.`` prefix), so the name can never carry SQL.

    >>> split_table_name("ops.scheduled_tasks")
    ('ops', 'scheduled_tasks')
    """
    if not isinstance(qualified, str):
        raise ValueError(f"table must be a string, got {type(qualified).__name__}")
    match = _TABLE_NAME.match(qualified)
    if match is None:
        raise ValueError(
            f"table {qualified!r} is not a plain identifier: use letters, digits and '_' "
            "(at most 63, not starting with a digit), with an optional 'schema.' prefix"
        )
    return match.group(1), match.group(2)


def make_table(
    qualified_name: str = DEFAULT_TABLE,
    metadata: sa.MetaData | None = None,
    *,
    revision: int = REVISION,
) -> sa.Table:
    """Build the scheduler table for a validated name (see :func:`split_table_name`).

    ``revision`` is the migration whose shape to build: 1 is the first table; 2 adds the
    pick's ``claim`` stamp and the ``prev_*`` copies of what a pick overwrote (a pick whose
    answer was lost, or a database without ``RETURNING``, reads them back), and widens
    ``payload`` where the first one could not hold :data:`MAX_STATE_BYTES`; 3 adds the
    runtime columns (:func:`runtime_columns`); 4 the execution controls
    (:func:`control_columns`; the limits live in ``<table>_groups``); 5 the alert columns
    (:func:`alert_columns`) next to the run history ``<table>_runs``; 6 no column: the batch
    items table ``<table>_items`` (those three: :func:`make_groups_table`,
    :func:`make_runs_table`, :func:`make_items_table`); 7 the trigger's trace link
    (:func:`trigger_columns`); 8 to 10 change only the companion tables.

    What an old revision builds never changes: a later shape is a new revision that this
    function (or a companion table's builder) adds behind ``revision >= N``, and the helpers
    below each hold the columns of the one revision they name.
    ``tests/integration/test_schema_snapshots.py`` compares what each migration creates with
    a committed snapshot.

    >>> make_table("jobs").c.queue_name.name
    'queue_name'
    """
    schema, name = split_table_name(qualified_name)
    metadata = metadata if metadata is not None else sa.MetaData()
    zero = FalseDefault()
    table = sa.Table(
        name,
        metadata,
        sa.Column(
            "id",
            id_type(),
            sa.Identity(),
            primary_key=True,
        ),
        sa.Column("queue_name", name_type(MAX_NAME_LENGTH), nullable=False),
        sa.Column("payload", text_type() if revision < 2 else state_type(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column(
            "next_process_at",
            UTCDateTime(),
            nullable=False,
        ),
        sa.Column("attempt", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column(
            "reenqueue_attempt", sa.BigInteger(), nullable=False, server_default=sa.text("0")
        ),
        sa.Column(
            "total_attempt",
            sa.BigInteger(),
            nullable=False,
            server_default=sa.text("0"),
        ),
        sa.Column("paused", Flag(), nullable=False, server_default=zero),
        sa.Column("locked_by", sa.Unicode(255), nullable=True),
        sa.Column("heartbeat_at", UTCDateTime(), nullable=True),
        sa.Column("last_started_at", UTCDateTime(), nullable=True),
        sa.Column("last_finished_at", UTCDateTime(), nullable=True),
        sa.Column("last_status", sa.Unicode(16), nullable=True),
        sa.Column("last_error", sa.Unicode(MAX_ERROR_LENGTH), nullable=True),
        sa.Column("schedule", sa.Unicode(MAX_SCHEDULE_LENGTH), nullable=True),
        sa.Column(
            "stop_requested",
            Flag(),
            nullable=False,
            server_default=zero,
        ),
        *(revision_2_columns() if revision >= 2 else []),
        *(runtime_columns() if revision >= 3 else []),
        *(control_columns() if revision >= 4 else []),
        *(alert_columns() if revision >= 5 else []),
        *(trigger_columns() if revision >= 7 else []),
        sa.UniqueConstraint("queue_name", name=f"{name}_uq"),
        sa.Index(f"{name}_next_idx", "next_process_at"),
        *([claim_index(name, revision)] if revision >= 2 else []),
        *([sa.Index(f"{name}_handler_idx", "handler", "next_process_at")]
          if revision >= 3 else []),
        *([alert_index(name, revision)] if revision >= 5 else []),
        *([rank_index(name)] if revision >= RANK_INDEX_REVISION else []),
        schema=schema,
        **table_options(),
    )
    if revision >= 4:
        control_indexes(table)
    return table


PARTIAL_INDEXES = frozenset({"postgresql", "sqlite", "mssql"})
"""Databases with partial (filtered) indexes: there the control indexes leave out the rows
that use no control, so that the many rows that do not cost nothing to keep indexed."""


CLAIM_INDEXED: tuple[str, ...] = ("sqlite", "mysql", "mariadb", "mssql", "oracle")
"""The databases that keep ``<name>_claim_idx`` from revision 12: all but PostgreSQL."""


def claim_index(name: str, revision: int = REVISION) -> sa.Index:
    """``<name>_claim_idx (claim)``; from revision 12 not made on PostgreSQL.

    There the pick returns the rows it took, and the claim is read only after a pick whose
    answer was lost; that read is bounded by the lease instead (``Dialect.claimed``). Each
    pick writes a new random claim, and every update that is not HOT adds an entry to each
    index of the row: with :func:`alert_index`, these two cost about 8 % of the server's CPU
    per execution. MySQL/MariaDB and Oracle read every pick's rows back by their claim.
    SQLite keeps it (dropping it saved nothing measurable there), and so does SQL Server (not
    measured)."""
    index = sa.Index(f"{name}_claim_idx", "claim")
    if revision >= HOT_PATH_INDEX_REVISION:
        index = index.ddl_if(dialect=CLAIM_INDEXED)  # type: ignore[arg-type]  # tuple accepted
    return index


ALERT_INDEX_WHERE = sa.text("alert_after IS NOT NULL OR alerted_at IS NOT NULL")
"""The rows :func:`alert_index` keeps on PostgreSQL."""


def alert_index(name: str, revision: int = REVISION) -> sa.Index:
    """``<name>_alert_idx (alerted_at, alert_after)``, for the lateness check's reads of rows
    past their dead-man limit and of alerts that recovered. From revision 12, on PostgreSQL,
    only rows with a limit or an alert: the many without either then take no entry at each
    pick and finish (see :func:`claim_index`). Both reads name one of the two conditions, so
    PostgreSQL still uses it; SQLite, which proves no ``OR``, keeps the whole index."""
    if revision < HOT_PATH_INDEX_REVISION:
        return sa.Index(f"{name}_alert_idx", "alerted_at", "alert_after")
    return sa.Index(f"{name}_alert_idx", "alerted_at", "alert_after",
                    postgresql_where=ALERT_INDEX_WHERE)


def rank_index(name: str) -> sa.Index:
    """``<name>_rank_idx (priority, next_process_at)``, made on MySQL/MariaDB only (revision
    11): their pick walks it for the due rows of priority other than 0 (neither server has
    partial indexes, so ``pick_idx`` is not made there, and a range on ``handler`` is not
    possible under the pick's handler condition). Elsewhere it is not made."""
    return sa.Index(f"{name}_rank_idx", "priority", "next_process_at").ddl_if(
        dialect=("mysql", "mariadb"))  # type: ignore[arg-type]  # a tuple is accepted


def control_indexes(table: sa.Table) -> list[sa.Index]:
    """The indexes revision 4 adds (attached to ``table``):

    * ``<name>_group_idx (task_group, locked_by)`` — a group's running rows, without reading
      its waiting ones; only rows with a group where the database allows;
    * ``<name>_pick_idx (handler, priority DESC, next_process_at)``, only rows whose priority
      is not 0, and only where the database allows (elsewhere it is not made: only the
      PostgreSQL pick looks for its rows per handler, in this order).
    """
    t, name = table, table.name
    grouped: dict[str, Any] = {f"{d}_where": t.c.task_group.is_not(None)
                               for d in sorted(PARTIAL_INDEXES)}
    prioritised: dict[str, Any] = {f"{d}_where": t.c.priority != 0
                                   for d in sorted(PARTIAL_INDEXES)}
    return [
        sa.Index(f"{name}_group_idx", t.c.task_group, t.c.locked_by, **grouped),
        sa.Index(f"{name}_pick_idx", t.c.handler, t.c.priority.desc(), t.c.next_process_at,
                 **prioritised),
    ]


def revision_2_columns() -> list[sa.Column[Any]]:
    """The columns revision 2 adds: the last pick's claim stamp and what it overwrote."""
    return [
        sa.Column("claim", sa.String(CLAIM_LENGTH), nullable=True),
        sa.Column("prev_locked_by", sa.Unicode(255), nullable=True),
        sa.Column("prev_next_process_at", UTCDateTime(), nullable=True),
        sa.Column("prev_last_started_at", UTCDateTime(), nullable=True),
    ]


def runtime_columns() -> list[sa.Column[Any]]:
    """The columns revision 3 adds: which handler runs the row, the JSON it receives
    (``ctx.data``) and its stored execution options (JSON object text).

    ``handler`` is written on every row (a declared task's handler is its own name, and the
    migration sets it so on existing rows); the pick filters by it, a short list, instead of
    by every task name. It is nullable only because Oracle stores ``''`` as ``NULL``: a row
    without a handler is run by no node, and ``list`` says so.
    """
    return [
        sa.Column("handler", name_type(MAX_NAME_LENGTH), nullable=True),
        sa.Column("data", state_type(), nullable=True),
        sa.Column("options", sa.Unicode(MAX_OPTIONS_LENGTH), nullable=True),
    ]


def control_columns() -> list[sa.Column[Any]]:
    """The columns revision 4 adds, copies of options the pick filters and orders by (the
    ``options`` JSON holds them all): ``priority`` (higher first), ``task_group`` (whose
    running executions ``<table>_groups`` may cap) and ``requires`` (the tag a node must
    carry). Their indexes: :func:`control_indexes`."""
    return [
        sa.Column("priority", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("task_group", name_type(MAX_NAME_LENGTH), nullable=True),
        sa.Column("requires", name_type(MAX_NAME_LENGTH), nullable=True),
    ]


def alert_columns() -> list[sa.Column[Any]]:
    """The columns revision 5 adds for lateness alerts.

    ``last_success_at`` is when the task last succeeded (the finish sets it); ``alert_after``
    (seconds, ``NULL`` for none) is the task's dead-man limit: an alert when its last success
    (or its creation) is older; ``alerted_at`` is set by the one node that raised an alert
    episode and cleared by the one that saw it recover. The index on ``(alerted_at,
    alert_after)`` lets the lateness check read only alerted rows and rows with a limit.
    """
    return [
        sa.Column("last_success_at", UTCDateTime(), nullable=True),
        sa.Column("alert_after", sa.Double(), nullable=True),
        sa.Column("alerted_at", UTCDateTime(), nullable=True),
    ]


TRIGGER_LINK_LENGTH = 128
"""Longest ``trigger_link``: a W3C ``traceparent`` (55 characters), a space and a token."""


def trigger_columns() -> list[sa.Column[Any]]:
    """The column revision 7 adds: the trace context ``trigger()`` was called in, and the
    fencing token of the execution it made due (``"<traceparent> <token>"``), so that this
    execution's span links to the caller's and no later one does."""
    return [sa.Column("trigger_link", sa.String(TRIGGER_LINK_LENGTH), nullable=True)]


COLUMNS: tuple[str, ...] = tuple(c.name for c in make_table().columns)
"""The column names, in table order; a table missing one of them is rejected at start-up."""


# The tables beside the tasks table.
GROUPS_SUFFIX = "_groups"
"""The group-limit table of ``<table>`` is ``<table>_groups``."""


def groups_table_name(qualified_name: str) -> str:
    """``<table>_groups`` with the same schema. A table name too long for the suffix within
    63 characters is shortened, with a hash of the full name kept unique.

    >>> groups_table_name("ops.jobs")
    'ops.jobs_groups'
    """
    schema, name = split_table_name(qualified_name)
    grouped = f"{name}{GROUPS_SUFFIX}"
    if len(grouped) > 63:
        digest = hashlib.sha1(name.encode()).hexdigest()[:8]
        grouped = f"{name[:63 - len(GROUPS_SUFFIX) - 9]}_{digest}{GROUPS_SUFFIX}"
    return f"{schema}.{grouped}" if schema else grouped


def make_groups_table(qualified_name: str = DEFAULT_TABLE,
                      metadata: sa.MetaData | None = None, revision: int = REVISION) -> sa.Table:
    """The table of group limits of the scheduler table ``qualified_name``: one row per
    limited group, ``max_running`` its cap across the cluster. A group without a row has no
    limit. ``revision`` is the migration whose shape to build (4 creates it; none changes
    it since).

    >>> make_groups_table("jobs").name
    'jobs_groups'
    """
    _created_by(GROUPS_REVISION, revision, "groups")
    schema, name = split_table_name(groups_table_name(qualified_name))
    return sa.Table(
        name,
        metadata if metadata is not None else sa.MetaData(),
        sa.Column("name", name_type(MAX_NAME_LENGTH), primary_key=True),
        sa.Column("max_running", sa.Integer(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=True),
        schema=schema,
        **table_options(),
    )


def runs_table_name(qualified_name: str = DEFAULT_TABLE) -> str:
    """The run history's table for a tasks table: ``<table>_runs``, in the same schema.

    >>> runs_table_name("ops.jobs")
    'ops.jobs_runs'
    """
    schema, name = split_table_name(qualified_name)
    return f"{schema}.{name}_runs" if schema else f"{name}_runs"


def make_runs_table(
    qualified_name: str = DEFAULT_TABLE, metadata: sa.MetaData | None = None,
    revision: int = REVISION,
) -> sa.Table:
    """Build the run history of the tasks table ``qualified_name``: ``<table>_runs``, one row
    per finished execution (revision 5).

    A row is identified by its execution: ``(task_name, token, started_at)`` is unique (a
    task deleted and created again starts its tokens anew, at a later time), so a row can be
    written before the finish it belongs to and found again by whoever settles it. The index
    on ``(task_name, finished_at)`` serves a task's newest runs and its count limit, the one
    on ``finished_at`` the newest runs of all tasks and the age limit, and the one on
    ``(status, finished_at)`` (revision 10) a filter on a rare status (``cancelled``) without
    reading the whole history. ``revision`` is the migration whose shape to build (5 creates
    it, 9 adds ``traceback``, 10 the status index).

    >>> make_runs_table("jobs").name
    'jobs_runs'
    """
    _created_by(RUNS_REVISION, revision, "runs")
    schema, name = split_table_name(qualified_name)
    runs = f"{name}_runs"
    return sa.Table(
        runs,
        metadata if metadata is not None else sa.MetaData(),
        sa.Column("id", id_type(), sa.Identity(), primary_key=True),
        sa.Column("task_name", name_type(MAX_NAME_LENGTH), nullable=False),
        sa.Column("token", sa.BigInteger(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("node_id", sa.Unicode(255), nullable=False),
        sa.Column("scheduled_at", UTCDateTime(), nullable=False),
        sa.Column("started_at", UTCDateTime(), nullable=False),
        sa.Column("finished_at", UTCDateTime(), nullable=False),
        sa.Column("status", sa.Unicode(16), nullable=False),
        sa.Column("error", sa.Unicode(MAX_ERROR_LENGTH), nullable=True),
        *([traceback_column()] if revision >= TRACEBACK_REVISION else []),
        sa.UniqueConstraint("task_name", "token", "started_at", name=f"{runs}_uq"),
        sa.Index(f"{runs}_task_idx", "task_name", "finished_at"),
        sa.Index(f"{runs}_time_idx", "finished_at"),
        *([runs_status_index(runs)] if revision >= STATUS_INDEX_REVISION else []),
        schema=schema,
        **table_options(),
    )


RUNS_REVISION = 5
"""The migration that creates the run history."""
TRACEBACK_REVISION = 9
"""The migration that adds the run history's ``traceback`` column."""
STATUS_INDEX_REVISION = 10
"""The migration that adds the run history's index on ``(status, finished_at)``."""


def runs_status_index(runs_name: str) -> sa.Index:
    """The run history's ``<runs>_status_idx`` on ``(status, finished_at)`` (revision 10).

    A filter on a status reads that status's newest runs in order from it, whatever their
    share of the history (``cancelled`` may be one run in ten thousand: without it the
    database reads the whole table to find a page of them). Its range on ``finished_at``
    serves a status with a time range too. The cursor's tie-break on ``id`` needs no column:
    InnoDB's secondary indexes end with the primary key, and PostgreSQL sorts only the rows
    of one ``finished_at`` (an incremental sort). One index, not one per filter: each costs
    every run row written.
    """
    return sa.Index(f"{runs_name}_status_idx", "status", "finished_at")


def traceback_column() -> sa.Column[str]:
    """The run history's ``traceback`` (revision 9): the bounded traceback of a failure
    that raised, innermost frames kept; ``NULL`` for the other runs."""
    return sa.Column("traceback", state_type(), nullable=True)


def items_table_name(qualified_name: str = DEFAULT_TABLE) -> str:
    """``<table>_items``, in the tasks table's schema: where pushed batch items wait.

    >>> items_table_name("ops.jobs")
    'ops.jobs_items'
    """
    schema, name = split_table_name(qualified_name)
    # The suffix must keep the name a plain identifier of at most 63 characters.
    items = f"{name[:57]}_items"
    return f"{schema}.{items}" if schema else items


def make_items_table(qualified_name: str = DEFAULT_TABLE,
                     metadata: sa.MetaData | None = None, revision: int = REVISION) -> sa.Table:
    """The batch items table of the tasks table ``qualified_name`` at the migration
    ``revision`` (6 creates it; none changes it since).

    One row per pushed item, waiting for the delivery of its key's row (``task_name``, the
    tasks table's ``queue_name``): ``id`` is the push order; ``due_at`` and ``moves`` are what
    the push asked of the key's due time (``ontime``; ``update="always"``), so that the due
    time of items pushed while a delivery runs is known when it ends; ``pushed_at`` (database
    clock) tells a delivery which items were pushed before it was picked.

    >>> make_items_table("jobs").name
    'jobs_items'
    """
    _created_by(ITEMS_REVISION, revision, "items")
    schema, name = split_table_name(items_table_name(qualified_name))
    metadata = metadata if metadata is not None else sa.MetaData()
    return sa.Table(
        name,
        metadata,
        sa.Column("id", id_type(), sa.Identity(), primary_key=True),
        sa.Column("task_name", name_type(MAX_NAME_LENGTH), nullable=False),
        sa.Column("handler", name_type(MAX_NAME_LENGTH), nullable=False),
        sa.Column("batch_key", name_type(MAX_NAME_LENGTH), nullable=False),
        sa.Column("item", state_type(), nullable=True),
        sa.Column("due_at", UTCDateTime(), nullable=False),
        sa.Column("moves", Flag(), nullable=False, server_default=FalseDefault()),
        sa.Column("pushed_at", UTCDateTime(), nullable=False),
        sa.Index(f"{name}_task_idx", "task_name", "id"),
        sa.Index(f"{name}_key_idx", "handler", "batch_key"),
        schema=schema,
        **table_options(),
    )


def nodes_table_name(qualified_name: str = DEFAULT_TABLE) -> str:
    """``<table>_nodes``, in the tasks table's schema: the node registry.

    >>> nodes_table_name("ops.jobs")
    'ops.jobs_nodes'
    """
    schema, name = split_table_name(qualified_name)
    # The suffix must keep the name a plain identifier of at most 63 characters.
    nodes = f"{name[:57]}_nodes"
    return f"{schema}.{nodes}" if schema else nodes


def make_nodes_table(qualified_name: str = DEFAULT_TABLE,
                     metadata: sa.MetaData | None = None, revision: int = REVISION) -> sa.Table:
    """The node registry of the tasks table ``qualified_name`` at the migration ``revision``
    (8 creates it; none changes it since).

    One row per node that ever started on the table, written by the node itself with its
    heartbeat: ``last_seen`` (database clock) says whether it is alive, ``running`` how many
    executions it had then; ``tags`` and ``handlers`` are JSON lists of names. Rows of nodes
    unseen for a long time are pruned by the live ones.

    >>> make_nodes_table("jobs").name
    'jobs_nodes'
    """
    _created_by(NODES_REVISION, revision, "nodes")
    schema, name = split_table_name(nodes_table_name(qualified_name))
    return sa.Table(
        name,
        metadata if metadata is not None else sa.MetaData(),
        sa.Column("node_id", sa.Unicode(255), primary_key=True),
        sa.Column("host", sa.Unicode(255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("version", sa.Unicode(64), nullable=False),
        sa.Column("tags", state_type(), nullable=True),
        sa.Column("handlers", state_type(), nullable=True),
        sa.Column("started_at", UTCDateTime(), nullable=False),
        sa.Column("last_seen", UTCDateTime(), nullable=False),
        sa.Column("running", sa.Integer(), nullable=False),
        schema=schema,
        **table_options(),
    )


GROUPS_REVISION = 4
"""The migration that creates ``<table>_groups``."""
ITEMS_REVISION = 6
"""The migration that creates ``<table>_items``."""
NODES_REVISION = 8
"""The migration that creates ``<table>_nodes``."""


def _created_by(created: int, revision: int, what: str) -> None:
    """Refuse a shape asked of a revision before the one that creates the table: a
    migration that builds it too early is a mistake, not an empty table."""
    if not created <= revision <= REVISION:
        raise ValueError(f"the {what} table exists from revision {created} to {REVISION}, "
                         f"not at revision {revision}")


ITEM_COLUMNS: tuple[str, ...] = tuple(c.name for c in make_items_table().columns)
"""The items table's column names, in table order."""
