"""Alembic environment of dbscheduler's own migrations (used by ``dbscheduler migrate``).

The table name comes from ``config.attributes["dbscheduler_table"]`` (set by the CLI) or the
``dbscheduler_table`` main option; the version table is dbscheduler's own, never the
application's ``alembic_version``.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import engine_from_config, pool

from dbscheduler.migrate import table_name_from, version_table_for

config = context.config
table = table_name_from(config)
schema = table.split(".")[0] if "." in table else None
version_table = config.attributes.get("version_table") or version_table_for(table)


def run_offline() -> None:
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        literal_binds=True,
        version_table=version_table,
        version_table_schema=schema,
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        context.configure(
            connection=connection, version_table=version_table, version_table_schema=schema
        )
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = engine_from_config(
        config.get_section(config.config_ini_section, {}), prefix="sqlalchemy.",
        poolclass=pool.NullPool,
    )
    with engine.connect() as conn:
        context.configure(connection=conn, version_table=version_table, version_table_schema=schema)
        with context.begin_transaction():
            context.run_migrations()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
