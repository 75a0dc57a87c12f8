"""Create the scheduler table.

Revision ID: dbscheduler_0001
Revises:
Create Date: 2026-11-22

The table is built by :func:`dbscheduler.table.make_table` (its revision 1), the same
definition the engine and the ``ddl/*.sql`` files use; a test proves that what this migration
creates equals it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context, op

from dbscheduler.migrate import table_name_from
from dbscheduler.table import make_table, split_table_name

revision = "dbscheduler_0001"
down_revision = None
branch_labels = ("dbscheduler",)
depends_on = None


def upgrade() -> None:
    table = make_table(table_name_from(context.config), revision=1)
    columns = [c._copy() for c in table.columns]
    uniques = [
        sa.UniqueConstraint(*c.columns.keys(), name=c.name)
        for c in list(table.constraints)
        if isinstance(c, sa.UniqueConstraint)
    ]
    op.create_table(table.name, *columns, *uniques, schema=table.schema, **table.kwargs)
    for index in table.indexes:
        op.create_index(
            index.name, table.name, [c.name for c in index.columns], schema=table.schema
        )


def downgrade() -> None:
    schema, name = split_table_name(table_name_from(context.config))
    op.drop_table(name, schema=schema)
