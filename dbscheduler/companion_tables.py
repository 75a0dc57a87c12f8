"""The tables beside the tasks table, one of each per tasks table: ``<table>_groups`` (group
limits), ``<table>_runs`` (the run history), ``<table>_items`` (pending batch items) and
``<table>_nodes`` (the node registry).

Like :func:`dbscheduler.table.make_table`, each is defined once here with SQLAlchemy Core and
built by the migrations, the ``ddl/*.sql`` files and the engine alike.
"""

from __future__ import annotations

import hashlib

import sqlalchemy as sa

from .dialects.types import (
    FalseDefault,
    Flag,
    UTCDateTime,
    id_type,
    name_type,
    state_type,
    table_options,
)
from .table import (
    DEFAULT_TABLE,
    MAX_ERROR_LENGTH,
    MAX_NAME_LENGTH,
    REVISION,
    split_table_name,
)

__all__ = [
    "ITEM_COLUMNS",
    "groups_table_name",
    "items_table_name",
    "make_groups_table",
    "make_items_table",
    "make_nodes_table",
    "make_runs_table",
    "nodes_table_name",
    "runs_table_name",
    "traceback_column",
]

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
