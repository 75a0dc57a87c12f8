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

from sqlalchemy.engine import Engine

from .dialects import dialect_named, names
from .table import DEFAULT_TABLE, REVISION, split_table_name

__all__ = ["HEAD", "migrations_dir", "offline_sql", "quiet_alembic", "upgrade", "version_table_for"]

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
    """Create or upgrade ``table`` on ``engine``'s database to ``revision`` (online)."""
    url = engine.url.render_as_string(hide_password=False)
    with quiet_alembic(), engine.begin() as conn:
        command.upgrade(_config(url, table, connection=conn), revision)


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
