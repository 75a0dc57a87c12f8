"""The trace context a trigger was called in, for the execution it made due.

Revision ID: dbscheduler_0007
Revises: dbscheduler_0006
Create Date: 2026-11-23

* ``trigger_link`` — ``"<traceparent> <token>"``: written by ``trigger()`` when called inside
  a traced span (and trace links are on), cleared by every other trigger or reschedule; the
  execution whose fencing token matches links its span to the caller's.

Existing rows keep every value; the new column is empty.
"""

from __future__ import annotations

from alembic import context, op

from dbscheduler.migrate import table_name_from
from dbscheduler.table import make_table, trigger_columns

revision = "dbscheduler_0007"
down_revision = "dbscheduler_0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    table = make_table(table_name_from(context.config), revision=7)
    for column in trigger_columns():
        op.add_column(table.name, column, schema=table.schema)


def downgrade() -> None:
    table = make_table(table_name_from(context.config), revision=7)
    for column in reversed(trigger_columns()):
        op.drop_column(table.name, column.name, schema=table.schema)
