"""The traceback of each failure in the run history.

Revision ID: dbscheduler_0009
Revises: dbscheduler_0008
Create Date: 2026-11-26

* ``<table>_runs.traceback`` — the bounded traceback (the innermost frames kept) of a run
  whose function raised; ``NULL`` for the other runs.

Existing run rows keep every value; their traceback is empty.
"""

from __future__ import annotations

from alembic import context, op

from dbscheduler.migrate import table_name_from
from dbscheduler.table import make_runs_table, traceback_column

revision = "dbscheduler_0009"
down_revision = "dbscheduler_0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    runs = make_runs_table(table_name_from(context.config), revision=9)
    op.add_column(runs.name, traceback_column(), schema=runs.schema)


def downgrade() -> None:
    runs = make_runs_table(table_name_from(context.config), revision=9)
    op.drop_column(runs.name, "traceback", schema=runs.schema)
