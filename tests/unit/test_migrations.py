"""Migrations, ``ddl/*.sql`` and the table definition agree, checked without a database.

Applying them to real databases is ``tests/integration/test_migrations.py``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dbscheduler.migrate import migrations_dir, offline_sql
from dbscheduler.table import make_table

ROOT = Path(__file__).resolve().parents[2]
DIALECTS = ("sqlite", "postgresql", "mysql", "mssql", "oracle")


@pytest.mark.parametrize("dialect", DIALECTS)
def test_ddl_file_is_what_the_migrations_produce(dialect: str) -> None:
    path = ROOT / "ddl" / f"{dialect}.sql"
    assert path.exists(), f"ddl/{dialect}.sql is missing: run `dbscheduler ddl --write`"
    assert path.read_text() == offline_sql(dialect), (
        f"ddl/{dialect}.sql drifted from the migrations; regenerate it with "
        "`dbscheduler ddl --write`"
    )


@pytest.mark.parametrize("dialect", DIALECTS)
def test_offline_sql_honours_a_custom_table_name(dialect: str) -> None:
    sql = offline_sql(dialect, "ops.jobs")
    assert "scheduled_tasks" not in sql
    assert re.search(r"CREATE TABLE \[?ops\]?\.\[?jobs\]?", sql), sql
    assert "jobs_version" in sql and "alembic_version" not in sql


def test_migrations_ship_inside_the_package_or_checkout() -> None:
    assert (migrations_dir() / "env.py").is_file()
    assert list((migrations_dir() / "versions").glob("0001_*.py"))


def test_definition_compiles_on_every_dialect() -> None:
    from sqlalchemy.dialects import mssql, mysql, oracle, postgresql, sqlite
    from sqlalchemy.schema import CreateTable

    table = make_table()
    expected = {
        "postgresql": "TIMESTAMP WITH TIME ZONE",
        "mysql": "DATETIME(6)",
        "mssql": "DATETIME2(6)",
        "oracle": "TIMESTAMP WITH TIME ZONE",
        "sqlite": "VARCHAR(26)",
    }
    for d in (postgresql.dialect(), mysql.dialect(), mssql.dialect(), oracle.dialect(),
              sqlite.dialect()):
        ddl = str(CreateTable(table).compile(dialect=d))
        assert f"next_process_at {expected[d.name]} NOT NULL" in ddl, ddl


