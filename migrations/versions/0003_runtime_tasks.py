"""Work created at run time: the handler a row runs with, its data and its options.

Revision ID: dbscheduler_0003
Revises: dbscheduler_0002
Create Date: 2026-11-23

* ``handler`` — the name of the function that runs the row. Every existing row was declared
  with ``@scheduler.task``, whose handler is the task's own name: the upgrade sets it so.
* ``data`` — JSON text a runtime task's handler receives as ``ctx.data``.
* ``options`` — the row's execution options, a JSON object (empty today).
* index ``<table>_handler_idx`` on ``(handler, next_process_at)``: the poll and the pick look
  up the earliest due row of each handler a node has.

Existing rows keep every value.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context, op

from dbscheduler.migrate import table_name_from
from dbscheduler.table import make_table, runtime_columns

revision = "dbscheduler_0003"
down_revision = "dbscheduler_0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    table = make_table(table_name_from(context.config), revision=3)
    name, schema = table.name, table.schema
    for column in runtime_columns():
        op.add_column(name, column, schema=schema)
    op.execute(sa.update(table).values(handler=table.c.queue_name))
    op.create_index(f"{name}_handler_idx", name, ["handler", "next_process_at"], schema=schema)


def downgrade() -> None:
    table = make_table(table_name_from(context.config), revision=3)
    name, schema = table.name, table.schema
    op.drop_index(f"{name}_handler_idx", table_name=name, schema=schema)
    for column in reversed(runtime_columns()):
        op.drop_column(name, column.name, schema=schema)
