"""Picks that hold no lock: a claim stamp, copies of what a pick overwrote, a wider payload.

Revision ID: dbscheduler_0002
Revises: dbscheduler_0001
Create Date: 2026-11-23

* ``claim`` — a random value each pick statement writes on the rows it takes, so the rows can
  be read back by it (MySQL/MariaDB and Oracle, which cannot return updated rows; and any
  pick whose answer was lost with its connection).
* ``prev_locked_by``, ``prev_next_process_at``, ``prev_last_started_at`` — the values the pick
  overwrote, copied by the same statement (lost-execution recovery needs them).
* ``payload`` becomes ``LONGTEXT`` on MySQL/MariaDB (``TEXT`` holds 64 KiB, less than the
  documented state limit); the other databases already hold it.

Existing rows keep every value; the new columns start ``NULL``.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context, op

from dbscheduler.migrate import table_name_from
from dbscheduler.table import make_table, revision_2_columns

revision = "dbscheduler_0002"
down_revision = "dbscheduler_0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    table = make_table(table_name_from(context.config), revision=2)
    old = make_table(table_name_from(context.config), revision=1)
    name, schema = table.name, table.schema
    for column in revision_2_columns():
        op.add_column(name, column, schema=schema)
    op.create_index(f"{name}_claim_idx", name, ["claim"], schema=schema)
    if op.get_context().dialect.name in ("mysql", "mariadb"):
        op.alter_column(
            name, "payload", type_=table.c.payload.type, existing_type=old.c.payload.type,
            existing_nullable=True, schema=schema,
        )


def downgrade() -> None:
    table = make_table(table_name_from(context.config), revision=1)
    name, schema = table.name, table.schema
    if op.get_context().dialect.name in ("mysql", "mariadb"):
        op.alter_column(name, "payload", type_=table.c.payload.type,
                        existing_type=sa.UnicodeText(), existing_nullable=True, schema=schema)
    op.drop_index(f"{name}_claim_idx", table_name=name, schema=schema)
    for column in reversed(revision_2_columns()):
        op.drop_column(name, column.name, schema=schema)
