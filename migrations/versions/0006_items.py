"""Keyed delayed batches: the ``<table>_items`` table where pushed items wait.

Revision ID: dbscheduler_0006
Revises: dbscheduler_0005
Create Date: 2026-11-24

One row per pushed item (``push(key, item, handler=…)``), delivered with the other items of
its key when the key's row in the tasks table (``<handler>/<key>``) is due. Built from
:func:`dbscheduler.table.make_items_table`; the tasks table is not changed.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context, op

from dbscheduler.migrate import table_name_from
from dbscheduler.table import make_items_table

revision = "dbscheduler_0006"
down_revision = "dbscheduler_0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    items = make_items_table(table_name_from(context.config), sa.MetaData(), revision=6)
    op.create_table(items.name, *[c._copy() for c in items.columns], schema=items.schema,
                    **items.kwargs)
    for index in sorted(items.indexes, key=lambda i: str(i.name)):
        op.create_index(index.name, items.name, [c.name for c in index.columns],
                        schema=items.schema)


def downgrade() -> None:
    items = make_items_table(table_name_from(context.config), sa.MetaData(), revision=6)
    op.drop_table(items.name, schema=items.schema)
