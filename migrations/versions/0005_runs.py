"""Run history and lateness alerts.

Revision ID: dbscheduler_0005
Revises: dbscheduler_0004
Create Date: 2026-11-24

* ``<table>_runs`` — one row per finished execution (success, error, lost, cancelled,
  timeout, skipped), unique by ``(task_name, token, started_at)``, indexed by
  ``(task_name, finished_at)`` and by ``finished_at``.
* ``last_success_at`` — when the task last succeeded. Rows whose last run succeeded get its
  finish time; for the others it is unknown and stays ``NULL`` (a dead-man limit then counts
  from the row's creation until the next success).
* ``alert_after`` — a task's dead-man limit in seconds, ``NULL`` for none.
* ``alerted_at`` — set while an alert episode of the task is open.
* index ``<table>_alert_idx`` on ``(alerted_at, alert_after)``: the lateness check reads only
  alerted rows and rows with a limit.

Existing rows keep every value.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context, op

from dbscheduler.migrate import table_name_from
from dbscheduler.table import alert_columns, make_runs_table, make_table

revision = "dbscheduler_0005"
down_revision = "dbscheduler_0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    qualified = table_name_from(context.config)
    table = make_table(qualified, revision=5)
    name, schema = table.name, table.schema
    for column in alert_columns():
        op.add_column(name, column, schema=schema)
    op.execute(
        sa.update(table)
        .where(table.c.last_status == "success")
        .values(last_success_at=table.c.last_finished_at)
    )
    op.create_index(f"{name}_alert_idx", name, ["alerted_at", "alert_after"], schema=schema)
    runs = make_runs_table(qualified, revision=5)
    uniques = [
        sa.UniqueConstraint(*c.columns.keys(), name=c.name)
        for c in list(runs.constraints)
        if isinstance(c, sa.UniqueConstraint)
    ]
    op.create_table(runs.name, *(c._copy() for c in runs.columns), *uniques, schema=schema,
                    **runs.kwargs)
    for index in sorted(runs.indexes, key=lambda i: str(i.name)):
        op.create_index(index.name, runs.name, [c.name for c in index.columns], schema=schema)


def downgrade() -> None:
    qualified = table_name_from(context.config)
    table = make_table(qualified, revision=5)
    name, schema = table.name, table.schema
    op.drop_table(make_runs_table(qualified, revision=5).name, schema=schema)
    op.drop_index(f"{name}_alert_idx", table_name=name, schema=schema)
    for column in reversed(alert_columns()):
        op.drop_column(name, column.name, schema=schema)
