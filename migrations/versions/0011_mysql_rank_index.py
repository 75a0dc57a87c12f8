"""The pick's index of ranked rows on MySQL/MariaDB.

Revision ID: dbscheduler_0011
Revises: dbscheduler_0010
Create Date: 2026-11-26

* index ``<table>_rank_idx`` on ``(priority, next_process_at)``, on MySQL and MariaDB only
  (elsewhere the partial ``pick_idx`` of revision 4 serves; neither server has partial
  indexes, and the pick's handler condition, an ``OR``, allows no range on ``handler``): the
  pick reads the due rows of priority other than 0 by walking it, so its cost grows with the
  rows it takes and those ranked rows, not with every due row. Without it that read ranged
  over every due row by
  due time (tens of milliseconds per pick with 20,000 rows due), whatever the table's
  statistics. Other databases are left as they are.

Existing rows keep every value. On MySQL/MariaDB building the index is an online ``ALTER``
(writes go on) that reads the whole table.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context, op

from dbscheduler.migrate import table_name_from
from dbscheduler.table import RANK_INDEX_REVISION, make_table

revision = "dbscheduler_0011"
down_revision = "dbscheduler_0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    index = _pick_index()
    if index is not None:
        table = index.table
        assert isinstance(table, sa.Table)
        op.create_index(str(index.name), table.name, list(index.expressions),
                        schema=table.schema, unique=False)


def downgrade() -> None:
    index = _pick_index()
    if index is not None:
        table = index.table
        assert isinstance(table, sa.Table)
        op.drop_index(str(index.name), table_name=table.name, schema=table.schema)


def _pick_index() -> sa.Index | None:
    """The rank index, where this revision makes it (MySQL/MariaDB); else None."""
    if context.get_context().dialect.name not in ("mysql", "mariadb"):
        return None
    table = make_table(table_name_from(context.config), revision=RANK_INDEX_REVISION)
    (index,) = (i for i in table.indexes if str(i.name) == f"{table.name}_rank_idx")
    return index
