"""Each migration creates the shape it created when it was written, on every real database.

The upgrade is taken one revision at a time; after each, the tables of the family (the tasks
table and its ``_groups``, ``_runs``, ``_items`` and ``_nodes``) are reflected — columns with
their types, nullability and defaults, indexes with their columns, order and conditions,
keys — and compared with ``schema_snapshots/<database>/<revision>.json``. A change to a
builder (``dbscheduler/table.py``) or to a type in
``dbscheduler/dialects/types.py`` that leaks into an old revision fails here: an old revision
must never change what it creates, a new shape is a new revision.

A new revision's snapshots are written by::

    DBSCHEDULER_WRITE_SNAPSHOTS=1 python -m pytest tests/integration/test_schema_snapshots.py -n 0

which writes the snapshots that do not exist yet and never rewrites one (delete a file to
take it again, e.g. when a new SQLAlchemy reflects a type under another name).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from dbscheduler.migrate import upgrade
from dbscheduler.table import (
    REVISION,
    make_groups_table,
    make_items_table,
    make_nodes_table,
    make_runs_table,
    make_table,
)
from tests.databases import drop_table, unique_table

SNAPSHOTS = Path(__file__).resolve().parent / "schema_snapshots"
SNAPSHOT_BACKENDS = ("sqlite", "postgresql", "mysql")
"""The databases whose snapshots are kept: the ones every run of the suite has."""
WRITE = os.environ.get("DBSCHEDULER_WRITE_SNAPSHOTS") == "1"
PLACEHOLDER = "{table}"


def _text(value: Any, table: str) -> Any:
    """``value`` as JSON, the test's table name replaced by a placeholder."""
    if isinstance(value, dict):
        return {_text(k, table): _text(v, table) for k, v in sorted(value.items())}
    if isinstance(value, (list, tuple)):
        return [_text(v, table) for v in value]
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return re.sub(rf"\b{re.escape(table)}(?=\b|_)", PLACEHOLDER, str(value))


def reflect(engine: sa.Engine, table: str) -> dict[str, Any]:
    """The tables of ``table``'s family as the database describes them (its migration
    version table left out: Alembic's, not ours)."""
    inspector = sa.inspect(engine)
    family = sorted(n for n in inspector.get_table_names()
                    if (n == table or n.startswith(f"{table}_")) and n != f"{table}_version")
    shape: dict[str, Any] = {}
    for name in family:
        columns = [{
            "name": c["name"],
            "type": str(c["type"].compile(dialect=engine.dialect)),
            "nullable": bool(c["nullable"]),
            "default": None if c.get("default") is None else str(c["default"]),
            "identity": bool(c.get("identity")) or bool(c.get("autoincrement") is True),
        } for c in inspector.get_columns(name)]
        indexes = sorted(
            ({"name": i["name"], "columns": i["column_names"], "unique": bool(i["unique"]),
              "sorting": i.get("column_sorting") or {},
              "options": {k: v for k, v in (i.get("dialect_options") or {}).items()
                          if k.endswith("_where")}}
             for i in inspector.get_indexes(name)), key=lambda i: str(i["name"]))
        uniques = sorted(({"name": u["name"], "columns": u["column_names"]}
                          for u in inspector.get_unique_constraints(name)),
                         key=lambda u: str(u["name"]))
        key = inspector.get_pk_constraint(name)["constrained_columns"]
        shape[name] = {"columns": columns, "indexes": indexes, "unique": uniques,
                       "primary_key": key}
    result = _text(shape, table)
    assert isinstance(result, dict)
    return result


def _path(backend: str, revision: int) -> Path:
    return SNAPSHOTS / backend / f"{revision:04d}.json"


def test_each_revision_creates_its_snapshot(backend: str, db_url: str, table_name: str) -> None:
    if backend not in SNAPSHOT_BACKENDS:
        pytest.skip(f"no schema snapshots are kept for {backend}")
    engine = sa.create_engine(db_url)
    try:
        shapes: dict[int, dict[str, Any]] = {}
        for revision in range(1, REVISION + 1):
            upgrade(engine, table_name, revision=f"dbscheduler_{revision:04d}")
            shapes[revision] = reflect(engine, table_name)
    finally:
        engine.dispose()
    for revision, shape in shapes.items():
        path = _path(backend, revision)
        if WRITE and not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(shape, indent=1, ensure_ascii=False) + "\n")
        assert path.exists(), (
            f"no snapshot of revision {revision} on {backend}: take it with "
            "DBSCHEDULER_WRITE_SNAPSHOTS=1 python -m pytest "
            "tests/integration/test_schema_snapshots.py -n 0")
        assert shape == json.loads(path.read_text()), (
            f"revision {revision} no longer creates on {backend} what it created when it was "
            f"written ({path.relative_to(SNAPSHOTS.parent)}): a change to today's table "
            "definition reached an old revision; put it behind a new revision instead")
    kept = sorted(p.name for p in (SNAPSHOTS / backend).glob("*.json"))
    assert kept == [f"{n:04d}.json" for n in range(1, REVISION + 1)], (
        f"snapshots without a revision (or the reverse) in {SNAPSHOTS / backend}")


def test_the_table_definition_is_the_newest_revision(backend: str, db_url: str,
                                                     table_name: str) -> None:
    """Today's builders create, on a fresh database, what the migrations create: the
    engine's definition of the tables and the newest revision agree."""
    engine = sa.create_engine(db_url)
    built = unique_table()
    try:
        upgrade(engine, table_name)
        migrated = reflect(engine, table_name)
        metadata = sa.MetaData()
        for builder in (make_table, make_groups_table, make_runs_table, make_items_table,
                        make_nodes_table):
            builder(built, metadata)
        if engine.dialect.name not in ("postgresql", "sqlite", "mssql"):
            # Revision 4 makes the priority pick's index only where it can be partial.
            tasks = metadata.tables[built]
            tasks.indexes.discard(next(i for i in tasks.indexes
                                       if str(i.name) == f"{built}_pick_idx"))
        metadata.create_all(engine)
        assert reflect(engine, built) == migrated
    finally:
        engine.dispose()
        drop_table(db_url, built)
