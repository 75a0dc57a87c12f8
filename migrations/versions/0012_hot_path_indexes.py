"""PostgreSQL: no claim index, and an alert index of the rows with an alert only.

Revision ID: dbscheduler_0012
Revises: dbscheduler_0011
Create Date: 2026-11-29

* index ``<table>_claim_idx`` dropped on PostgreSQL, where the pick returns the rows it took
  (``UPDATE … RETURNING``): there the claim is read only after a pick whose answer was lost,
  and that read is bounded by the lease's range of ``next_process_at`` instead. Each pick
  writes a new random claim.
* index ``<table>_alert_idx`` on PostgreSQL made again with ``WHERE alert_after IS NOT NULL
  OR alerted_at IS NOT NULL``: the lateness check reads only such rows from it.

Every update that is not HOT adds an entry to each index of its row; a pick and a finish are
such updates. Without these two entries each, the server's CPU per execution fell by about
8 %. Other databases are left as they are: MySQL/MariaDB and Oracle read every pick's
rows back by their claim, SQLite was not found to gain, SQL Server was not measured.

Existing rows keep every value. Building the alert index again reads the whole table and
holds writes to it meanwhile.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context, op

from dbscheduler.migrate import table_name_from
from dbscheduler.table import ALERT_INDEX_WHERE, HOT_PATH_INDEX_REVISION, make_table

revision = "dbscheduler_0012"
down_revision = "dbscheduler_0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    table = _table()
    if table is not None:
        name, schema = table.name, table.schema
        op.drop_index(f"{name}_claim_idx", table_name=name, schema=schema)
        op.drop_index(f"{name}_alert_idx", table_name=name, schema=schema)
        op.create_index(f"{name}_alert_idx", name, ["alerted_at", "alert_after"],
                        schema=schema, unique=False, postgresql_where=ALERT_INDEX_WHERE)


def downgrade() -> None:
    table = _table()
    if table is not None:
        name, schema = table.name, table.schema
        op.drop_index(f"{name}_alert_idx", table_name=name, schema=schema)
        op.create_index(f"{name}_alert_idx", name, ["alerted_at", "alert_after"],
                        schema=schema, unique=False)
        op.create_index(f"{name}_claim_idx", name, ["claim"], schema=schema, unique=False)


def _table() -> sa.Table | None:
    """The table, where this revision changes it (PostgreSQL); else None."""
    if context.get_context().dialect.name != "postgresql":
        return None
    return make_table(table_name_from(context.config), revision=HOT_PATH_INDEX_REVISION)
