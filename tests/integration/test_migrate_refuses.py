"""``dbscheduler migrate`` on a table its version table does not record says what the table
is and what to do, instead of failing on CREATE TABLE (the user's Alembic case is in
``test_migrations.py``, where the guide's environment makes one)."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from dbscheduler.migrate import HEAD, TableManagedElsewhere, upgrade
from dbscheduler.table import make_table


def test_a_table_made_by_hand_is_refused_with_what_to_do(tmp_path: Path) -> None:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'db.sqlite3'}")
    try:
        make_table("jobs").create(engine)
        with pytest.raises(TableManagedElsewhere) as raised:
            upgrade(engine, "jobs")
        message = str(raised.value)
        assert "jobs_version records no revision" in message
        assert HEAD in message
        upgrade(engine, "other")  # a table of its own is created as before
        upgrade(engine, "other")  # and upgraded
    finally:
        engine.dispose()
