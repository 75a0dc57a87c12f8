"""Execution controls: priority, concurrency groups and node tags.

Revision ID: dbscheduler_0004
Revises: dbscheduler_0003
Create Date: 2026-11-23

* ``priority`` (default 0), ``task_group``, ``requires`` — copies of the row's options that
  the pick orders and filters by (the ``options`` JSON keeps them all).
* index ``<table>_group_idx`` on ``(task_group, locked_by)``: a group's running rows (only
  rows with a group, where the database has partial indexes).
* index ``<table>_pick_idx`` on ``(handler, priority DESC, next_process_at)`` of the rows
  whose priority is not 0: the PostgreSQL pick's order (made only where partial indexes
  exist).
* table ``<table>_groups`` — ``(name, max_running, updated_at)``: the limit of each capped
  group (``set_group_limit``); a group without a row has no limit.

Existing rows keep every value; they get priority 0, no group and no required tag.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context, op

from dbscheduler.migrate import table_name_from
from dbscheduler.table import PARTIAL_INDEXES, control_columns, make_groups_table, make_table

revision = "dbscheduler_0004"
down_revision = "dbscheduler_0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    qualified = table_name_from(context.config)
    table = make_table(qualified, revision=4)
    name, schema = table.name, table.schema
    for column in control_columns():
        op.add_column(name, column, schema=schema)
    for index in _indexes(table):
        op.create_index(index.name, name, list(index.expressions), schema=schema, unique=False,
                        **index.dialect_kwargs)
    groups = make_groups_table(qualified, revision=4)
    op.create_table(groups.name, *(c._copy() for c in groups.columns), schema=groups.schema,
                    **groups.kwargs)


def downgrade() -> None:
    qualified = table_name_from(context.config)
    table = make_table(qualified, revision=4)
    name, schema = table.name, table.schema
    groups = make_groups_table(qualified, revision=4)
    op.drop_table(groups.name, schema=groups.schema)
    for index in reversed(_indexes(table)):
        op.drop_index(index.name, table_name=name, schema=schema)
    for column in reversed(control_columns()):
        op.drop_column(name, column.name, schema=schema)


def _indexes(table: sa.Table) -> list[sa.Index]:
    """The control indexes this database gets: the pick's only where it can be partial."""
    dialect = context.get_context().dialect.name
    return [i for i in sorted(table.indexes, key=lambda i: str(i.name))
            if i.name in (f"{table.name}_group_idx", f"{table.name}_pick_idx")
            and (dialect in PARTIAL_INDEXES or not str(i.name).endswith("_pick_idx"))]
