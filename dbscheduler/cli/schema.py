"""``migrate`` and ``ddl``: creating and upgrading the table, and its SQL for each database."""

from __future__ import annotations

from pathlib import Path

import click
import sqlalchemy as sa

from ..dialects import names as dialect_names
from ..table import split_table_name
from .group import cli
from .target import create_engine, database_options, resolve, translated_errors

DDL_DIALECTS = dialect_names()
"""The dialects of the repository's ``ddl/`` files, written by ``ddl --write``."""
DIALECT_CHOICES = (*DDL_DIALECTS, "mariadb")


@cli.command()
@database_options
def migrate(url: str | None, table: str | None) -> None:
    """Create or upgrade the table (Alembic, with its own version table <table>_version)."""
    from ..migrate import upgrade  # Alembic: imported only by the commands that need it

    target = resolve(url, table)
    engine = create_engine(target)
    try:
        with translated_errors(target):
            before = _revisions(engine, target.table)
            upgrade(engine, target.table)
            after = _revisions(engine, target.table)
    finally:
        engine.dispose()
    where = f"table {target.table} on {target.safe_url}"
    if before == after:
        click.echo(f"{where} is up to date (revision {', '.join(after) or 'none'})")
    else:
        click.echo(
            f"upgraded {where}: {', '.join(before) or '(no table)'} -> {', '.join(after)}"
        )


def _revisions(engine: sa.Engine, table: str) -> tuple[str, ...]:
    """The Alembic revisions recorded in dbscheduler's version table (empty if none)."""
    from alembic.runtime.migration import MigrationContext

    from ..migrate import version_table_for

    schema, _ = split_table_name(table)
    with engine.connect() as conn:
        context = MigrationContext.configure(
            conn,
            opts={"version_table": version_table_for(table), "version_table_schema": schema},
        )
        return tuple(sorted(context.get_current_heads()))


@cli.command()
@click.option("--dialect", type=click.Choice(DIALECT_CHOICES),
              help="the SQL dialect [default: the dialect of --url]")
@click.option("--write", "write_dir", metavar="DIR",
              type=click.Path(file_okay=False, path_type=Path),
              help="write DIR/<dialect>.sql for every dialect (or only --dialect) instead of "
                   "printing")
@database_options
def ddl(dialect: str | None, write_dir: Path | None, url: str | None, table: str | None) -> None:
    """Print the SQL that creates the table, to apply it by hand.

    `dbscheduler ddl --write ddl` regenerates the repository's ddl/ files.
    """
    from ..migrate import offline_sql

    target = resolve(url, table)
    if write_dir is not None:
        write_dir.mkdir(parents=True, exist_ok=True)
        for name in [dialect] if dialect else DDL_DIALECTS:
            path = write_dir / f"{name}.sql"
            with path.open("w", encoding="utf-8", newline="\n") as out:
                out.write(offline_sql(name, target.table))
            click.echo(f"wrote {path}")
        return
    if dialect is None:
        try:
            dialect = sa.engine.make_url(target.url).get_backend_name()
        except sa.exc.ArgumentError as exc:
            raise click.BadParameter(str(exc), param_hint="'--url'") from None
        if dialect not in DIALECT_CHOICES:
            raise click.UsageError(
                f"no DDL for the {dialect!r} database of --url; pass --dialect "
                f"({', '.join(DIALECT_CHOICES)})"
            )
    click.echo(offline_sql(dialect, target.table), nl=False)
