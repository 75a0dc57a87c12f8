"""The ``dbscheduler`` command line: migrate, inspect and operate the tasks of one table.

::

    dbscheduler [--url URL] [--table NAME] COMMAND [ARGS]

``--url`` and ``--table`` are accepted before or after the command (the command's own wins),
and default to ``$DBSCHEDULER_URL`` / ``$DBSCHEDULER_TABLE``, then to the embedded SQLite file
``./dbscheduler.sqlite3`` and ``scheduled_tasks``.

Exit codes: ``0`` success, ``1`` the operation failed (unknown task, task running, missing
table, database error: one message on stderr, no traceback), ``2`` usage error (bad option,
invalid table name, naive ``--at``, unknown dialect).

Every command except ``run`` works on a scheduler that is never started: it opens the
database, runs one short transaction and exits. ``run MODULE:ATTR`` starts a node for the
:class:`~dbscheduler.Scheduler` found at that import path and stops it gracefully on Ctrl-C or
SIGTERM.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, TypeVar

import click
import sqlalchemy as sa
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from . import __version__
from .context import TaskInfo
from .errors import SchedulerError, TaskRunning
from .scheduler import DEFAULT_URL, Scheduler
from .store import Store
from .table import DEFAULT_TABLE, split_table_name

__all__ = ["OperationFailed", "cli", "humanize", "main"]

DDL_DIALECTS = ("sqlite", "postgresql", "mysql", "mssql", "oracle")
"""The dialects of the repository's ``ddl/`` files, written by ``ddl --write``."""
DIALECT_CHOICES = (*DDL_DIALECTS, "mariadb")
NON_TTY_WIDTH = 1000
"""Line width limit when stdout is not a terminal and ``$COLUMNS`` is unset (rich would use
80): piped output keeps one task per line, at its natural width, for grep and awk."""
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
STATUS_STYLES = {"success": "green", "error": "red", "lost": "yellow", "cancelled": "magenta"}

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

_URL_HELP = (
    "SQLAlchemy URL of the database [env DBSCHEDULER_URL; default: the embedded SQLite file "
    f"{DEFAULT_URL.removeprefix('sqlite:///')}]"
)
_TABLE_HELP = f"the scheduler table [env DBSCHEDULER_TABLE; default: {DEFAULT_TABLE}]"


def database_options(command: C) -> C:
    """Add ``--url``/``--table`` to a command, so they may also follow the command name."""
    command = click.option("--table", "table", default=None, metavar="NAME", help=_TABLE_HELP)(
        command
    )
    return click.option("--url", "url", default=None, metavar="URL", help=_URL_HELP)(command)


def resolve(url: str | None, table: str | None) -> Target:
    """The command's ``--url``/``--table`` if given, else the group's (which include the env).

    An invalid table name is a usage error (exit 2).
    """
    group = click.get_current_context().find_object(Target)
    assert group is not None, "commands run inside the dbscheduler group"
    target = Target(url if url is not None else group.url,
                    table if table is not None else group.table)
    try:
        split_table_name(target.table)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--table'") from None
    return target


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
    except SchedulerError as exc:
        raise OperationFailed(str(exc)) from exc
    except sa.exc.SQLAlchemyError as exc:
        raise OperationFailed(
            f"database error on {target.safe_url}: {describe_database_error(exc)}"
        ) from exc
    except ImportError as exc:
        raise OperationFailed(_driver_hint(exc, target.safe_url)) from exc


def create_engine(target: Target) -> sa.Engine:
    """An engine for ``target``; a malformed URL or unknown dialect is a usage error."""
    return _build(target, lambda: sa.create_engine(target.url))


def _build(target: Target, make: Callable[[], T]) -> T:
    try:
        return make()
    except (sa.exc.ArgumentError, ValueError) as exc:
        # A malformed URL, an unknown SQLAlchemy dialect or a database we do not support.
        raise click.BadParameter(str(exc), param_hint="'--url'") from None
    except ImportError as exc:
        raise OperationFailed(_driver_hint(exc, target.safe_url)) from exc


@contextmanager
def opened(target: Target) -> Iterator[Scheduler]:
    """A never-started :class:`Scheduler` on ``target``, its engine disposed afterwards."""
    scheduler = _build(target, lambda: Scheduler(target.url, table=target.table))
    try:
        with translated_errors(target):
            yield scheduler
    finally:
        scheduler.engine.dispose()


# -- rendering ---------------------------------------------------------------------------


def make_console() -> Console:
    """A console on stdout: colours only on a terminal, a wide table when piped."""
    width = None
    if not sys.stdout.isatty() and "COLUMNS" not in os.environ:
        width = NON_TTY_WIDTH
    return Console(file=sys.stdout, width=width, highlight=False, emoji=False, soft_wrap=False)


def render(renderable: Any) -> None:
    """Print a rich renderable on stdout; when piped, without trailing blanks on any line."""
    console = make_console()
    if console.is_terminal:
        console.print(renderable)
        return
    with console.capture() as captured:
        console.print(renderable)
    click.echo("\n".join(line.rstrip() for line in captured.get().splitlines()))


def humanize(delta: timedelta) -> str:
    """``"in 3m 10s"`` for a future offset, ``"5s ago"`` for a past one, ``"now"`` within 1 s.

    >>> humanize(timedelta(seconds=190)), humanize(timedelta(seconds=-5))
    ('in 3m 10s', '5s ago')
    >>> humanize(timedelta(days=1, hours=2, minutes=3))
    'in 1d 2h'
    """
    seconds = delta.total_seconds()
    if abs(seconds) < 1:
        return "now"
    rest = int(abs(seconds))
    days, rest = divmod(rest, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    units = [(days, "d"), (hours, "h"), (minutes, "m"), (secs, "s")]
    first = next(i for i, (value, _) in enumerate(units) if value)
    text = " ".join(f"{value}{unit}" for value, unit in units[first : first + 2] if value)
    return f"in {text}" if seconds > 0 else f"{text} ago"


def fmt_time(value: datetime) -> str:
    """``2026-03-29 02:30:00`` in UTC (whole seconds; ``--json`` keeps the microseconds)."""
    return value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def fmt_when(value: datetime | None, now: datetime) -> str:
    """Absolute UTC time and relative to the database clock, or ``-`` when unset."""
    if value is None:
        return "-"
    return f"{fmt_time(value)} ({humanize(value - now)})"


def _next_run(info: TaskInfo, now: datetime) -> Text:
    if info.running:
        return Text("after the current run", style="dim")
    text = Text(fmt_when(info.next_process_at, now))
    if info.paused:
        text.stylize("dim")
    return text


def _last_run(info: TaskInfo, now: datetime) -> Text:
    """The ``list`` column: the running execution, else how the last one ended and when."""
    if info.running and info.last_started_at is not None:
        return Text(f"running, started {humanize(info.last_started_at - now)}", style="cyan")
    return _last_status(info, now)


def _last_status(info: TaskInfo, now: datetime) -> Text:
    if info.last_status is None:
        return Text("never ran", style="dim")
    text = Text(info.last_status, style=STATUS_STYLES.get(info.last_status, ""))
    if info.last_finished_at is not None:
        text.append(f" {humanize(info.last_finished_at - now)}")
    return text


def tasks_table(infos: Sequence[TaskInfo], now: datetime, target: Target) -> Table:
    """The ``list`` table: one line per task."""
    table = Table(
        box=box.SIMPLE_HEAD,
        show_edge=False,
        caption=f"{len(infos)} task(s) in {target.table}, database time {fmt_time(now)} UTC",
        caption_justify="left",
    )
    table.add_column("name", style="bold", overflow="fold")
    table.add_column("schedule", overflow="fold")
    table.add_column("next run (UTC)", no_wrap=True)
    table.add_column("last run", no_wrap=True)
    table.add_column("attempt", justify="right")
    table.add_column("runs", justify="right")
    table.add_column("paused")
    table.add_column("running on", overflow="fold")
    for info in infos:
        table.add_row(
            Text(info.name),
            Text(info.schedule or "-"),
            _next_run(info, now),
            _last_run(info, now),
            str(info.attempt),
            str(info.total_attempt),
            Text("yes", style="yellow") if info.paused else Text("no"),
            Text(info.locked_by or "-"),
        )
    return table


def task_details(info: TaskInfo, now: datetime) -> Table:
    """The ``show`` view: every field of :class:`TaskInfo`, one per line."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")

    def when(value: datetime | None) -> Text:
        return Text(fmt_when(value, now))

    if info.running:
        status = Text(f"running on {info.locked_by}", style="cyan")
        if info.stop_requested:
            status.append(" (cancel requested)", style="magenta")
        next_label = "lease expires"
    else:
        status = Text("idle")
        next_label = "next run"
    rows: list[tuple[str, Text]] = [
        ("name", Text(info.name)),
        ("schedule", Text(info.schedule or "-")),
        ("status", status),
        (next_label, when(info.next_process_at)),
        ("paused", Text("yes" if info.paused else "no", style="yellow" if info.paused else "")),
        ("last status", _last_status(info, now)),
        ("last error", Text(info.last_error or "-", style="red" if info.last_error else "")),
        ("last started", when(info.last_started_at)),
        ("last finished", when(info.last_finished_at)),
        ("heartbeat", when(info.heartbeat_at)),
        ("attempt", Text(f"{info.attempt} (attempts of the current occurrence)")),
        ("runs", Text(f"{info.total_attempt} started, {info.reenqueue_attempt} succeeded")),
        ("state", Text("-" if info.state is None else json.dumps(info.state))),
        ("created", when(info.created_at)),
        ("locked by", Text(info.locked_by or "-")),
        ("id", Text(str(info.id))),
    ]
    for label, value in rows:
        grid.add_row(label, value)
    return grid


def emit_json(value: Any) -> None:
    """Print ``value`` as indented JSON on stdout (timestamps already ISO 8601 UTC)."""
    click.echo(json.dumps(value, indent=2, ensure_ascii=False))


# -- the group ---------------------------------------------------------------------------


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--url", envvar="DBSCHEDULER_URL", default=DEFAULT_URL, metavar="URL",
              help=_URL_HELP)
@click.option("--table", envvar="DBSCHEDULER_TABLE", default=DEFAULT_TABLE, metavar="NAME",
              help=_TABLE_HELP)
@click.version_option(__version__, prog_name="dbscheduler")
@click.pass_context
def cli(ctx: click.Context, url: str, table: str) -> None:
    """Operate dbscheduler's periodic tasks, stored in one SQL table.

    --url and --table may also be given after the command. Exit codes: 0 ok, 1 the operation
    failed, 2 usage error.
    """
    ctx.obj = Target(url, table)


@cli.command()
@database_options
def migrate(url: str | None, table: str | None) -> None:
    """Create or upgrade the table (Alembic, with its own version table <table>_version)."""
    from .migrate import upgrade  # Alembic: imported only by the commands that need it

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

    from .migrate import version_table_for

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
    from .migrate import offline_sql

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


@cli.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="print a JSON array of TaskInfo objects")
@database_options
def list_(as_json: bool, url: str | None, table: str | None) -> None:
    """Every task: schedule, next run, last run, attempt, paused, running on which node."""
    target = resolve(url, table)
    with opened(target) as scheduler:
        infos = scheduler.tasks()
        if as_json:
            emit_json([info.to_dict() for info in infos])
            return
        now = Store(scheduler.engine, scheduler.table).db_now()
    if not infos:
        click.echo(f"no tasks in table {target.table} on {target.safe_url}")
        return
    render(tasks_table(infos, now, target))


@cli.command()
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="print the TaskInfo as a JSON object")
@database_options
def show(name: str, as_json: bool, url: str | None, table: str | None) -> None:
    """Every field of one task."""
    target = resolve(url, table)
    with opened(target) as scheduler:
        info = scheduler.info(name)
        if as_json:
            emit_json(info.to_dict())
            return
        now = Store(scheduler.engine, scheduler.table).db_now()
    render(task_details(info, now))


def _next_line(scheduler: Scheduler, name: str) -> str:
    info = scheduler.info(name)
    now = Store(scheduler.engine, scheduler.table).db_now()
    paused = " (paused: it will not run until resumed)" if info.paused else ""
    return f"next run {fmt_when(info.next_process_at, now)}{paused}"


@cli.command()
@click.argument("name")
@database_options
def trigger(name: str, url: str | None, table: str | None) -> None:
    """Make a task due now (nodes on PostgreSQL wake at once; others within a poll)."""
    target = resolve(url, table)
    with opened(target) as scheduler:
        scheduler.trigger(name)
        click.echo(f"triggered {name!r}: {_next_line(scheduler, name)}")


@cli.command()
@click.argument("name")
@database_options
def pause(name: str, url: str | None, table: str | None) -> None:
    """Stop picking a task on every node (a running execution goes on)."""
    target = resolve(url, table)
    with opened(target) as scheduler:
        scheduler.pause(name)
        click.echo(f"paused {name!r} on every node")


@cli.command()
@click.argument("name")
@database_options
def resume(name: str, url: str | None, table: str | None) -> None:
    """Undo pause: the task runs at its stored next time (at once if that passed)."""
    target = resolve(url, table)
    with opened(target) as scheduler:
        scheduler.resume(name)
        click.echo(f"resumed {name!r}: {_next_line(scheduler, name)}")


def parse_aware(value: str) -> datetime:
    """An ISO 8601 date-time with an offset (``Z`` or ``+02:00``); naive is a usage error."""
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is not an ISO 8601 date-time, e.g. 2026-03-29T03:00:00Z",
            param_hint="'--at'",
        ) from None
    if at.tzinfo is None or at.utcoffset() is None:
        raise click.BadParameter(
            f"{value!r} has no UTC offset; add one, e.g. {value}Z or {value}+02:00",
            param_hint="'--at'",
        )
    return at


@cli.command()
@click.argument("name")
@click.option("--at", "at", required=True, metavar="ISO8601",
              help="the new due time with its offset, e.g. 2026-03-29T03:00:00Z")
@database_options
def reschedule(name: str, at: str, url: str | None, table: str | None) -> None:
    """Set when a task is next due."""
    target = resolve(url, table)
    when = parse_aware(at)
    with opened(target) as scheduler:
        scheduler.reschedule(name, when)
        click.echo(f"rescheduled {name!r}: {_next_line(scheduler, name)}")


@cli.command()
@click.argument("name")
@database_options
def cancel(name: str, url: str | None, table: str | None) -> None:
    """Ask a running execution to stop (its ctx.stop_requested is set within one heartbeat)."""
    target = resolve(url, table)
    with opened(target) as scheduler:
        if not scheduler.cancel(name):
            click.echo(f"{name!r} is not running: nothing to cancel")
            return
        node = scheduler.info(name).locked_by
        on = f" on node {node}" if node else ""
        click.echo(f"asked the running execution of {name!r}{on} to stop")


@cli.command()
@click.argument("name")
@click.option("--force", is_flag=True, help="delete it even while it runs")
@database_options
def delete(name: str, force: bool, url: str | None, table: str | None) -> None:
    """Delete a task's row (refused while it runs, unless --force).

    A node that still registers the task inserts it again when it starts.
    """
    target = resolve(url, table)
    with opened(target) as scheduler:
        try:
            scheduler.delete(name, force=force)
        except TaskRunning as exc:
            raise OperationFailed(
                f"task {name!r} is running on node {exc.node}: refusing to delete it; "
                "pass --force to delete it anyway"
            ) from exc
        click.echo(f"deleted {name!r}")


# -- run ---------------------------------------------------------------------------------


def load_scheduler(spec: str) -> Scheduler:
    """The :class:`Scheduler` at ``MODULE:ATTR`` (or returned by the callable found there).

    The working directory is importable, as with ``python -m``. A spec that names nothing is
    a usage error; an exception raised while importing the module propagates.
    """
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise click.BadParameter(
            f"{spec!r} is not MODULE:ATTR, e.g. myapp.tasks:scheduler", param_hint="'MODULE:ATTR'"
        )
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        obj: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing and (module_name == missing or module_name.startswith(missing + ".")):
            raise click.BadParameter(
                f"no module named {module_name!r} (working directory {cwd})",
                param_hint="'MODULE:ATTR'",
            ) from None
        raise
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise click.BadParameter(
                f"module {module_name!r} has no attribute {attr!r}", param_hint="'MODULE:ATTR'"
            ) from None
    if isinstance(obj, Scheduler):
        return obj
    if callable(obj):
        made = obj()
        if isinstance(made, Scheduler):
            return made
        raise click.BadParameter(
            f"{spec} returned {type(made).__name__}, not a dbscheduler.Scheduler",
            param_hint="'MODULE:ATTR'",
        )
    raise click.BadParameter(
        f"{spec} is a {type(obj).__name__}, not a dbscheduler.Scheduler (or a callable "
        "returning one)",
        param_hint="'MODULE:ATTR'",
    )


@cli.command()
@click.argument("spec", metavar="MODULE:ATTR")
@click.option("--log-level", type=click.Choice(LOG_LEVELS, case_sensitive=False),
              default="INFO", show_default=True, help="logging level (logs go to stderr)")
@click.option("--shutdown-timeout", type=click.FloatRange(min=0), default=30.0,
              show_default=True, help="seconds to wait for running tasks when stopping")
@click.pass_context
def run(ctx: click.Context, spec: str, log_level: str, shutdown_timeout: float) -> None:
    """Run a node for the Scheduler at MODULE:ATTR until Ctrl-C or SIGTERM.

    ATTR may also be a callable returning a Scheduler. The Scheduler uses the database it was
    built with: --url/--table do not apply (read DBSCHEDULER_URL in your code to share them).
    """
    parent = ctx.parent
    if parent is not None:
        for option in ("url", "table"):
            if parent.get_parameter_source(option) is click.core.ParameterSource.COMMANDLINE:
                raise click.UsageError(
                    f"--{option} does not apply to `run`: the Scheduler at {spec} uses the "
                    "database it was built with"
                )
    logging.basicConfig(
        level=log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
    )
    scheduler = load_scheduler(spec)
    url = scheduler.engine.url.render_as_string(hide_password=True)
    with translated_errors(Target(url, scheduler.table)):
        scheduler.run(shutdown_timeout=shutdown_timeout)


def main(argv: Sequence[str] | None = None) -> None:
    """The ``dbscheduler`` console script (also ``python -m dbscheduler``); exits the process."""
    cli.main(args=list(argv) if argv is not None else None, prog_name="dbscheduler")
