"""Upgrade a populated table from an older revision and read every row before and after.

Each migration's test seeds rows of the previous revision's shape, upgrades to head and
compares: every old column keeps its value, new columns get their documented defaults.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from dbscheduler.migrate import HEAD, upgrade, version_table_for
from dbscheduler.table import make_table

Rows = dict[str, dict[str, Any]]


def upgrade_populated(
    db_url: str, table_name: str, from_revision: int, rows: Sequence[dict[str, Any]]
) -> tuple[Rows, Rows, sa.Engine]:
    """Create ``table_name`` at ``from_revision``, insert ``rows``, upgrade to head.

    Returns the rows by ``queue_name`` before and after (every column, as read back) and the
    engine, which the caller disposes. Asserts the version table says head afterwards.
    """
    engine = sa.create_engine(db_url)
    upgrade(engine, table_name, revision=f"dbscheduler_{from_revision:04d}")
    old = make_table(table_name, revision=from_revision)
    with engine.begin() as conn:
        conn.execute(sa.insert(old), list(rows))
        before = {r.queue_name: dict(r._mapping)
                  for r in conn.execute(sa.select(old).order_by(old.c.id))}
    upgrade(engine, table_name)
    new = make_table(table_name)
    with engine.connect() as conn:
        version = conn.execute(
            sa.text(f"SELECT version_num FROM {version_table_for(table_name)}")
        ).scalar_one()
        after = {r.queue_name: dict(r._mapping)
                 for r in conn.execute(sa.select(new).order_by(new.c.id))}
    assert version == HEAD
    assert set(after) == set(before) == {r["queue_name"] for r in rows}
    for name, values in before.items():
        kept = {k: v for k, v in after[name].items() if k in values}
        assert kept == values, name
    return before, after, engine
