"""The node registry: ``<table>_nodes``, one row per node, written with its heartbeat.

Revision ID: dbscheduler_0008
Revises: dbscheduler_0007
Create Date: 2026-11-26

Each node records who it is (host, pid, version, tags, handlers), when it started, when it
was last seen on the database clock and how many executions it runs. Built from
:func:`dbscheduler.table.make_nodes_table`; the other tables are not changed.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context, op

from dbscheduler.migrate import table_name_from
from dbscheduler.table import make_nodes_table

revision = "dbscheduler_0008"
down_revision = "dbscheduler_0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    nodes = make_nodes_table(table_name_from(context.config), sa.MetaData(), revision=8)
    op.create_table(nodes.name, *[c._copy() for c in nodes.columns], schema=nodes.schema,
                    **nodes.kwargs)


def downgrade() -> None:
    nodes = make_nodes_table(table_name_from(context.config), sa.MetaData(), revision=8)
    op.drop_table(nodes.name, schema=nodes.schema)
