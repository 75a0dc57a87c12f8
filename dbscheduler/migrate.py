"""Creating and upgrading the table with Alembic, with dbscheduler's own version table.

Two ways (docs/guides/alembic.md):

* ``dbscheduler migrate --url URL [--table NAME]`` — upgrades to head, recording versions in
  ``<table>_version`` so it never touches the application's ``alembic_version``;
* in your own Alembic environment: add ``dbscheduler:_migrations/versions`` to
  ``version_locations``, optionally ``dbscheduler_table = my_table``, and
  ``alembic upgrade heads`` (the branch is labelled ``dbscheduler``).
"""

from __future__ import annotations

import io
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from .dialects import dialect_named, names
from .errors import TableManagedElsewhere
from .table import DEFAULT_TABLE, REVISION, split_table_name

__all__ = ["HEAD", "TableManagedElsewhere", "migrations_dir", "offline_sql", "quiet_alembic",
           "upgrade", "version_table_for"]

HEAD = f"dbscheduler_{REVISION:04d}"
"""The newest migration's revision id: what ``dbscheduler migrate`` upgrades a table to."""


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


_quiet_lock = threading.Lock()
_quiet_depth = 0
_quiet_saved = logging.NOTSET


@contextmanager
def quiet_alembic() -> Iterator[None]:
    """Keep Alembic's INFO lines (plugins, context, each revision) out of the application's
    logs while dbscheduler migrates on its own: the embedded default does it at every start.
    Warnings and errors still pass. Nested and concurrent uses restore the level once."""
    global _quiet_depth, _quiet_saved
    logger = logging.getLogger("alembic")
    with _quiet_lock:
        if _quiet_depth == 0:
            _quiet_saved = logger.level
            if logger.getEffectiveLevel() < logging.WARNING:
                logger.setLevel(logging.WARNING)
        _quiet_depth += 1
    try:
        yield
    finally:
        with _quiet_lock:
            _quiet_depth -= 1
            if _quiet_depth == 0:
                logger.setLevel(_quiet_saved)


# Importing Alembic sets up its plugins, one INFO line each.
with quiet_alembic():
    from alembic import command
    from alembic.config import Config


def upgrade(engine: Engine, table: str = DEFAULT_TABLE, revision: str = "heads") -> None:
    """Create or upgrade ``table`` on ``engine``'s database to ``revision`` (online).

    Raises :class:`TableManagedElsewhere` when the table exists but ``<table>_version``
    records no revision of it (your own Alembic manages it: upgrade it there).
    """
    url = engine.url.render_as_string(hide_password=False)
    with quiet_alembic(), engine.begin() as conn:
        _refuse_unrecorded(conn, table)
        command.upgrade(_config(url, table, connection=conn), revision)


def _refuse_unrecorded(conn: Connection, table: str) -> None:
    schema, name = split_table_name(table)
    inspector = sa.inspect(conn)
    if not inspector.has_table(name, schema=schema):
        return
    version = version_table_for(table)
    if inspector.has_table(version, schema=schema):
        recorded = conn.execute(sa.select(sa.column("version_num", sa.String))
                                .select_from(sa.table(version, schema=schema))).first()
        if recorded is not None:
            return
    theirs: list[str] = []
    for where in dict.fromkeys((schema, None)):  # the user's alembic_version, beside it or not
        if inspector.has_table("alembic_version", schema=where):
            theirs += [v for v in conn.execute(
                sa.select(sa.column("version_num", sa.String))
                .select_from(sa.table("alembic_version", schema=where))).scalars()
                if str(v).startswith("dbscheduler_")]
    if theirs:
        raise TableManagedElsewhere(
            f"table {table!r} is managed by your own Alembic: its alembic_version records "
            f"{', '.join(sorted(theirs))} (dbscheduler's branch), and {version} records "
            "nothing. Upgrade it where it was created, with `alembic upgrade heads` in your "
            "project, not with `dbscheduler migrate` (docs/guides/alembic.md, \"One way per "
            "table\")"
        )
    raise TableManagedElsewhere(
        f"table {table!r} exists, but {version} records no revision of it: it was made by "
        "hand or by another tool, and `dbscheduler migrate` would try to create it again. "
        f"If it has every column of revision {HEAD}, record that revision in {version} "
        f"(`dbscheduler ddl` shows the table and the version row); or rename it and run "
        "`dbscheduler migrate` again"
    )


def offline_sql(dialect: str, table: str = DEFAULT_TABLE) -> str:
    """The SQL ``upgrade`` would run on ``dialect``, without a server (Alembic ``--sql``)."""
    backend = dialect_named(dialect)
    if backend is None:
        raise ValueError(f"unknown dialect {dialect!r}; choose one of: {', '.join(names())}")
    out = io.StringIO()
    with quiet_alembic():
        command.upgrade(_config(backend.offline_url(dialect), table, stdout=out), "heads",
                        sql=True)
    return backend.finish_offline_sql(out.getvalue())
