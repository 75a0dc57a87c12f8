"""Creating and upgrading the table with Alembic, with dbscheduler's own version table.

Two ways (README "Migrations"):

* ``dbscheduler migrate --url URL [--table NAME]`` — upgrades to head, recording versions in
  ``<table>_version`` so it never touches the application's ``alembic_version``;
* in your own Alembic environment: add ``dbscheduler:_migrations/versions`` to
  ``version_locations``, optionally ``dbscheduler_table = my_table``, and
  ``alembic upgrade heads`` (the branch is labelled ``dbscheduler``).
"""

from __future__ import annotations

import io
import re
from importlib import resources
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy.engine import Engine

from .table import DEFAULT_TABLE, split_table_name

__all__ = ["migrations_dir", "offline_sql", "upgrade", "version_table_for"]


def migrations_dir() -> Path:
    """The Alembic scripts: inside the installed wheel, or ``migrations/`` of a checkout."""
    packaged = resources.files("dbscheduler") / "_migrations"
    if packaged.is_dir():
        return Path(str(packaged))
    return Path(__file__).resolve().parent.parent / "migrations"


def table_name_from(config: Config) -> str:
    """The table a migration run is for: the CLI's attribute, else the ini option."""
    name = config.attributes.get("dbscheduler_table") or config.get_main_option(
        "dbscheduler_table", DEFAULT_TABLE
    )
    split_table_name(name)
    return str(name)


def version_table_for(table: str) -> str:
    """dbscheduler's own Alembic version table for ``table`` (one per scheduler table)."""
    return f"{split_table_name(table)[1]}_version"


def _config(url: str, table: str, **attributes: Any) -> Config:
    split_table_name(table)
    out = attributes.pop("stdout", None) or io.StringIO()
    config = Config(stdout=out, output_buffer=out)
    config.set_main_option("script_location", str(migrations_dir()))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    config.attributes["dbscheduler_table"] = table
    config.attributes.update(attributes)
    return config


def upgrade(engine: Engine, table: str = DEFAULT_TABLE, revision: str = "heads") -> None:
    """Create or upgrade ``table`` on ``engine``'s database to ``revision`` (online)."""
    url = engine.url.render_as_string(hide_password=False)
    with engine.begin() as conn:
        command.upgrade(_config(url, table, connection=conn), revision)


def offline_sql(dialect: str, table: str = DEFAULT_TABLE) -> str:
    """The SQL ``upgrade`` would run on ``dialect``, without a server (Alembic ``--sql``)."""
    urls = {
        "sqlite": "sqlite://",
        "postgresql": "postgresql://",
        "mysql": "mysql+pymysql://",
        "mariadb": "mariadb+pymysql://",
        "mssql": "mssql+pyodbc://",
        "oracle": "oracle+oracledb://",
    }
    if dialect not in urls:
        raise ValueError(f"unknown dialect {dialect!r}; choose one of: {', '.join(urls)}")
    out = io.StringIO()
    command.upgrade(_config(urls[dialect], table, stdout=out), "heads", sql=True)
    # Alembic asks SQL Server and Oracle to return the inserted version number, which only
    # makes sense through a driver; a script to apply by hand must not carry it.
    sql = re.sub(r" OUTPUT inserted\.version_num", "", out.getvalue())
    sql = re.sub(r" RETURNING \S*version_num( INTO :ret_0)?", "", sql)
    if dialect == "oracle":
        sql += "COMMIT\n\n/\n\n"  # Oracle has no transactional DDL, but the INSERT needs it
    return sql
