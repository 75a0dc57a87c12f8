"""An index for the run history's status filter.

Revision ID: dbscheduler_0010
Revises: dbscheduler_0009
Create Date: 2026-11-26

* index ``<table>_runs_status_idx`` on ``(status, finished_at)``: the runs of one status,
  newest first, without reading the whole history (a filter on a rare status such as
  ``cancelled`` read every run row before); a status with a time range reads its range.

Existing run rows keep every value. Building the index reads the whole history: on
MySQL/MariaDB it is an online ``ALTER`` (writes go on), while PostgreSQL's ``CREATE INDEX``
holds the history's writes (finishes) until it is built; on a large history, create the
index ``CONCURRENTLY`` beforehand under the same name (``IF NOT EXISTS`` is not used here, so
then stamp this revision instead of upgrading through it).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context, op

from dbscheduler.migrate import table_name_from
from dbscheduler.table import STATUS_INDEX_REVISION, make_runs_table

revision = "dbscheduler_0010"
down_revision = "dbscheduler_0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    runs, index = _status_index()
    op.create_index(str(index.name), runs.name, [c.name for c in index.columns],
                    schema=runs.schema)


def downgrade() -> None:
    runs, index = _status_index()
    op.drop_index(str(index.name), table_name=runs.name, schema=runs.schema)


def _status_index() -> tuple[sa.Table, sa.Index]:
    runs = make_runs_table(table_name_from(context.config), revision=STATUS_INDEX_REVISION)
    (index,) = (i for i in runs.indexes if str(i.name) == f"{runs.name}_status_idx")
    return runs, index
