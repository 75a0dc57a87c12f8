"""Migrations, ``ddl/*.sql`` and the table definition are one shape on every database."""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from dbscheduler.migrate import migrations_dir, offline_sql, upgrade, version_table_for
from dbscheduler.table import COLUMNS, make_table

ROOT = Path(__file__).resolve().parents[2]
DIALECTS = ("sqlite", "postgresql", "mysql", "mssql", "oracle")


def statements(sql: str) -> list[str]:
    """The statements of an offline script, without comments and transaction control."""
    body = "\n".join(line for line in sql.splitlines() if not line.startswith("--"))
    parts = [p.strip() for p in re.split(r";\s*\n|^GO\s*$", body, flags=re.M)]
    return [p.rstrip(";") for p in parts if p and p.upper() not in ("BEGIN", "COMMIT", "GO")]


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


def _shape(engine: sa.Engine, table: str, schema: str | None = None) -> dict[str, Any]:
    insp = sa.inspect(engine)
    cols = {
        c["name"]: (str(c["type"].compile(dialect=engine.dialect)).lower(), c["nullable"])
        for c in insp.get_columns(table, schema=schema)
    }
    indexes = sorted(
        (tuple(i["column_names"]), bool(i["unique"])) for i in insp.get_indexes(table, schema)
    )
    uniques = sorted(tuple(u["column_names"]) for u in insp.get_unique_constraints(table, schema))
    return {"columns": cols, "indexes": [i for i in indexes if i[0] != ("queue_name",)],
            "unique": uniques or [("queue_name",)]}


def test_migrated_table_has_every_column(migrated: tuple[str, str]) -> None:
    url, table = migrated
    engine = sa.create_engine(url)
    try:
        shape = _shape(engine, table)
        assert list(shape["columns"]) == list(COLUMNS)
        assert ("queue_name",) in shape["unique"]
        assert (("next_process_at",), False) in shape["indexes"]
        with engine.connect() as conn:
            version = conn.execute(sa.text(f"SELECT version_num FROM {version_table_for(table)}"))
            assert version.scalar_one() == "dbscheduler_0001"
    finally:
        engine.dispose()


def test_migrate_twice_is_a_no_op(migrated: tuple[str, str]) -> None:
    url, table = migrated
    engine = sa.create_engine(url)
    upgrade(engine, table)
    engine.dispose()


def test_ddl_file_applies_and_equals_the_migrated_table(
    migrated: tuple[str, str], backend: str, tmp_path: Path
) -> None:
    url, table = migrated
    engine = sa.create_engine(url)
    sql = (ROOT / "ddl" / f"{'mysql' if backend == 'mysql' else backend}.sql").read_text()
    sandbox = f"ddl_{uuid.uuid4().hex[:8]}"
    try:
        if backend == "sqlite":
            other = sa.create_engine(f"sqlite:///{tmp_path / 'ddl.sqlite3'}")
            schema = None
        else:
            # Its own connection: SET search_path / USE must not leak into `engine`'s pool.
            other, schema = sa.create_engine(url, poolclass=sa.pool.NullPool), sandbox
            with engine.begin() as conn:
                conn.execute(sa.text(f"CREATE {'SCHEMA' if backend == 'postgresql' else 'DATABASE'}"
                                     f" {sandbox}"))
        with other.begin() as conn:
            if backend == "postgresql":
                conn.execute(sa.text(f"SET search_path TO {sandbox}"))
            elif backend == "mysql":
                conn.execute(sa.text(f"USE {sandbox}"))
            for stmt in statements(sql):
                conn.exec_driver_sql(stmt)
        applied = _shape(other, "scheduled_tasks", schema)
        assert applied == _shape(engine, table)
    finally:
        if backend != "sqlite":
            with engine.begin() as conn:
                kind = "SCHEMA" if backend == "postgresql" else "DATABASE"
                cascade = " CASCADE" if backend == "postgresql" else ""
                conn.execute(sa.text(f"DROP {kind} IF EXISTS {sandbox}{cascade}"))
        engine.dispose()


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


def test_a_users_own_alembic_environment_runs_our_branch(tmp_path: Path) -> None:
    """The README's three lines, in an environment generated by ``alembic init``."""
    from alembic import command
    from alembic.config import Config

    ini = tmp_path / "alembic.ini"
    command.init(Config(str(ini)), str(tmp_path / "alembic"))
    config = Config(str(ini))
    config.set_main_option("sqlalchemy.url", f"sqlite:///{tmp_path / 'app.db'}")
    config.set_main_option("path_separator", "space")
    # Installed wheels say dbscheduler:_migrations/versions; a checkout has the plain path.
    versions = migrations_dir() / "versions"
    config.set_main_option("version_locations", f"%(here)s/alembic/versions {versions}")
    config.set_main_option("dbscheduler_table", "app_jobs")
    command.upgrade(config, "heads")
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'app.db'}")
    try:
        assert set(sa.inspect(engine).get_table_names()) == {"alembic_version", "app_jobs"}
        with engine.connect() as conn:
            head = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar_one()
        assert head == "dbscheduler_0001"
    finally:
        engine.dispose()
