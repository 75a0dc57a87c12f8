"""The ``scheduled_tasks`` table, defined once with SQLAlchemy Core for any validated name.

The migrations, the ``ddl/*.sql`` files and the engine all build the table from
:func:`make_table`, so there is exactly one definition of its shape. How each database stores
a column (timestamps in UTC with microsecond precision, flags, names compared exactly) is the
dialects' business: :mod:`dbscheduler.dialects.types`.
"""

from __future__ import annotations

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
    "MAX_ERROR_LENGTH",
    "MAX_NAME_LENGTH",
    "MAX_STATE_BYTES",
    "make_table",
    "split_table_name",
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

REVISION = 7
"""The table shape :func:`make_table` builds by default (the newest migration's)."""

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
    runtime columns (:func:`runtime_columns`); 7 the trigger's trace link
    (:func:`trigger_columns`).

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
        *(trigger_columns() if revision >= 7 else []),
        sa.UniqueConstraint("queue_name", name=f"{name}_uq"),
        sa.Index(f"{name}_next_idx", "next_process_at"),
        *([sa.Index(f"{name}_claim_idx", "claim")] if revision >= 2 else []),
        *([sa.Index(f"{name}_handler_idx", "handler", "next_process_at")]
          if revision >= 3 else []),
        schema=schema,
        **table_options(),
    )
    return table


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


TRIGGER_LINK_LENGTH = 128
"""Longest ``trigger_link``: a W3C ``traceparent`` (55 characters), a space and a token."""


def trigger_columns() -> list[sa.Column[Any]]:
    """The column revision 7 adds: the trace context ``trigger()`` was called in, and the
    fencing token of the execution it made due (``"<traceparent> <token>"``), so that this
    execution's span links to the caller's and no later one does."""
    return [sa.Column("trigger_link", sa.String(TRIGGER_LINK_LENGTH), nullable=True)]


COLUMNS: tuple[str, ...] = tuple(c.name for c in make_table().columns)
"""The column names, in table order; a table missing one of them is rejected at start-up."""
