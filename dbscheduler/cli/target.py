"""The database a command works on (``--url``/``--table``), and how errors reach the user:
one line on stderr and exit code 1 for a failed operation, 2 for a usage error."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click
import sqlalchemy as sa

from ..client import Client
from ..dialects import DEFAULT_URL, connect_problem, normalize_url, unknown_scheme
from ..errors import SchedulerError, SchemaMissing, TaskNotFound
from ..table import DEFAULT_TABLE, split_table_name

C = TypeVar("C", bound=Callable[..., Any])
T = TypeVar("T")


class OperationFailed(click.ClickException):
    """The operation could not be done (exit code 1); click prints ``Error: <message>``."""

    exit_code = 1


@dataclass(frozen=True)
class Target:
    """The database and table a command works on."""

    url: str
    table: str

    @property
    def safe_url(self) -> str:
        """The URL with its password hidden, for messages."""
        try:
            return sa.engine.make_url(self.url).render_as_string(hide_password=True)
        except sa.exc.ArgumentError:
            return self.url


# -- options -----------------------------------------------------------------------------

URL_HELP = (
    "SQLAlchemy URL of the database [env DBSCHEDULER_URL; default: the embedded SQLite file "
    f"{DEFAULT_URL.removeprefix('sqlite:///')}]"
)
TABLE_HELP = f"the scheduler table [env DBSCHEDULER_TABLE; default: {DEFAULT_TABLE}]"


def database_options(command: C) -> C:
    """Add ``--url``/``--table`` to a command, so they may also follow the command name."""
    command = click.option("--table", "table", default=None, metavar="NAME", help=TABLE_HELP)(
        command
    )
    return click.option("--url", "url", default=None, metavar="URL", help=URL_HELP)(command)


def resolve(url: str | None, table: str | None) -> Target:
    """The command's ``--url``/``--table`` if given, else the group's (which include the env).

    An invalid table name is a usage error (exit 2).
    """
    group = click.get_current_context().find_object(Target)
    assert group is not None, "commands run inside the dbscheduler group"
    target = Target(_normalized(url if url is not None else group.url),
                    table if table is not None else group.table)
    try:
        split_table_name(target.table)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--table'") from None
    return target


def _normalized(url: str) -> str:
    """``url`` with the driver we depend on when it names none (``postgres://`` …)."""
    try:
        return normalize_url(url).render_as_string(hide_password=False)
    except sa.exc.ArgumentError:
        return url  # reported as a usage error where the URL is used


def describe_database_error(exc: sa.exc.SQLAlchemyError) -> str:
    """The driver's own message, without SQLAlchemy's SQL echo and background link."""
    orig = getattr(exc, "orig", None)
    if orig is not None:
        text = str(orig).strip() or type(orig).__name__
        return f"{type(orig).__name__}: {text}"
    return str(exc).split("\n(Background on this error", 1)[0].strip()


def _driver_hint(exc: ImportError, url: str) -> str:
    hint = f"cannot load the database driver for {url}: {exc}."
    backend = url.split(":", 1)[0]
    if backend.startswith("postgresql"):
        hint += " Install dbscheduler[postgresql] and use a postgresql+psycopg:// URL."
    elif backend.startswith(("mysql", "mariadb")):
        hint += " Install dbscheduler[mysql] and use a mysql+pymysql:// URL."
    elif backend.startswith("mssql"):
        hint += " Install dbscheduler[mssql] and use a mssql+pyodbc:// URL."
    elif backend.startswith("oracle"):
        hint += " Install dbscheduler[oracle] and use an oracle+oracledb:// URL."
    return hint


@contextmanager
def translated_errors(target: Target) -> Iterator[None]:
    """Turn the library's and the database's errors into exit code 1 with one message."""
    try:
        yield
    except TaskNotFound as exc:
        # A wrong --url or DBSCHEDULER_URL looks just like a wrong name: say where we looked.
        where = f"in table {exc.table!r}"
        raise OperationFailed(
            str(exc).replace(where, f"{where} on {target.safe_url}", 1)
        ) from exc
    except SchedulerError as exc:
        raise OperationFailed(str(exc)) from exc
    except sa.exc.SQLAlchemyError as exc:
        problem = connect_problem(target.url, exc)
        if problem is not None:
            raise OperationFailed(
                f"cannot connect to {target.safe_url}: {problem.message}"
            ) from exc
        raise OperationFailed(
            f"database error on {target.safe_url}: {describe_database_error(exc)}"
        ) from exc
    except ImportError as exc:
        raise OperationFailed(_driver_hint(exc, target.safe_url)) from exc


def create_engine(target: Target) -> sa.Engine:
    """An engine for ``target``; a malformed URL or unknown dialect is a usage error."""
    return _build(target, lambda: sa.create_engine(normalize_url(target.url)))


def _build(target: Target, make: Callable[[], T]) -> T:
    try:
        return make()
    except sa.exc.NoSuchModuleError:
        raise click.BadParameter(unknown_scheme(normalize_url(target.url)),
                                 param_hint="'--url'") from None
    except (sa.exc.ArgumentError, ValueError) as exc:
        # A malformed URL, an unknown SQLAlchemy dialect or a database we do not support.
        raise click.BadParameter(str(exc), param_hint="'--url'") from None
    except ImportError as exc:
        raise OperationFailed(_driver_hint(exc, target.safe_url)) from exc


@contextmanager
def opened(target: Target, overdue_after: float | None = None) -> Iterator[Client]:
    """A :class:`Client` on ``target``, closed afterwards (``overdue_after``: seconds, the
    client's default when None).

    Operations never create anything (not even the embedded default's file): a typo in
    ``--url`` must not leave an empty database behind.
    """
    client = _build(target, lambda: Client(target.url, table=target.table) if overdue_after is None
                    else Client(target.url, table=target.table, overdue_after=overdue_after))
    try:
        with translated_errors(target):
            require_table(client.engine, target)
            yield client
    finally:
        client.close()


def require_table(engine: sa.Engine, target: Target) -> None:
    """Fail (exit 1) unless ``target``'s SQLite file and table exist; checks nothing on
    server databases, whose operations report a missing table themselves."""
    url = engine.url
    if url.get_backend_name() != "sqlite":
        return
    database = url.database or ""
    if database and database != ":memory:" and not database.startswith("file:"):
        path = Path(database)
        if not path.exists():
            raise OperationFailed(
                f"no database at {path.resolve()} (no such file), so no table "
                f"{target.table!r}: pass --url (or set DBSCHEDULER_URL) to name your database, "
                f"or create this one with `dbscheduler migrate --url '{target.safe_url}'` or "
                "by starting a node on it"
            )
    schema, name = split_table_name(target.table)
    if not sa.inspect(engine).has_table(name, schema=schema):
        raise SchemaMissing(target.table, target.safe_url)
