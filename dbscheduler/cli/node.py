"""``run MODULE:ATTR``: a node for the Scheduler found at an import path."""

from __future__ import annotations

import importlib
import logging
import os
import sys
from typing import Any

import click
import sqlalchemy as sa

from ..dialects import normalize_url
from ..scheduler import Scheduler
from .group import cli
from .target import Target, database_options, translated_errors

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


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
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=None,
              help="serve Prometheus metrics at http://HOST:PORT/metrics "
                   "(needs dbscheduler[prometheus])")
@click.option("--metrics-host", default="127.0.0.1", show_default=True,
              help="the address --metrics-port listens on (0.0.0.0: every interface)")
@click.option("--listen-url", default=None, metavar="URL",
              help="PostgreSQL behind a pooler: a direct URL to the server for LISTEN "
                   "(instant wake-ups); see Scheduler(listen_url=)")
@database_options
@click.pass_context
def run(ctx: click.Context, spec: str, log_level: str, shutdown_timeout: float,
        metrics_port: int | None, metrics_host: str, listen_url: str | None,
        url: str | None, table: str | None) -> None:
    """Run a node for the Scheduler at MODULE:ATTR until Ctrl-C or SIGTERM.

    ATTR may also be a callable returning a Scheduler. The Scheduler uses the database it was
    built with; --url/--table (before or after MODULE:ATTR) are put in DBSCHEDULER_URL /
    DBSCHEDULER_TABLE before the module is imported, for code that reads them, and it is a
    usage error when the Scheduler found there uses another database or table.
    """
    given = _given_database_options(ctx, url, table)
    if "url" in given:
        os.environ["DBSCHEDULER_URL"] = given["url"]
    if "table" in given:
        os.environ["DBSCHEDULER_TABLE"] = given["table"]
    logging.basicConfig(
        level=log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
    )
    scheduler = load_scheduler(spec)
    _check_run_target(scheduler, spec, given)
    if listen_url is not None:
        scheduler.listen_url = listen_url
        try:
            scheduler._check_listen_url()
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="'--listen-url'") from None
    url = scheduler.engine.url.render_as_string(hide_password=True)
    if metrics_port is not None:
        try:
            from ..metrics import expose
        except ImportError as exc:
            raise click.UsageError(f"--metrics-port needs dbscheduler[prometheus]: {exc}") from None
        try:
            server = expose(scheduler, metrics_port, addr=metrics_host)
        except OSError as exc:
            raise click.UsageError(f"--metrics-host {metrics_host} --metrics-port "
                                   f"{metrics_port}: cannot listen there: {exc}") from None
        logging.getLogger("dbscheduler.cli").info(
            "metrics at http://%s:%d/metrics", metrics_host, server.port)
    with translated_errors(Target(url, scheduler.table)):
        scheduler.run(shutdown_timeout=shutdown_timeout)


def _given_database_options(ctx: click.Context, url: str | None,
                            table: str | None) -> dict[str, str]:
    """``--url``/``--table`` given on the command line, after ``run`` or before it."""
    given = {k: v for k, v in (("url", url), ("table", table)) if v is not None}
    parent = ctx.parent
    if parent is not None and isinstance(parent.obj, Target):
        for option in ("url", "table"):
            source = parent.get_parameter_source(option)
            if option not in given and source is click.core.ParameterSource.COMMANDLINE:
                given[option] = getattr(parent.obj, option)
    return given


def _check_run_target(scheduler: Scheduler, spec: str, given: dict[str, str]) -> None:
    """A usage error when ``--url``/``--table`` name another database than the node's."""
    if "url" in given:
        try:
            wanted = normalize_url(given["url"])
        except sa.exc.ArgumentError as exc:
            raise click.BadParameter(str(exc), param_hint="'--url'") from None
        if wanted.render_as_string(hide_password=False) != scheduler.engine.url.render_as_string(
            hide_password=False
        ):
            raise click.UsageError(
                f"--url does not apply to `run`: the Scheduler at {spec} uses "
                f"{scheduler.engine.url.render_as_string(hide_password=True)}, not "
                f"{wanted.render_as_string(hide_password=True)}; have your code read "
                "DBSCHEDULER_URL to take it from the command line"
            )
    if "table" in given and given["table"] != scheduler.table:
        raise click.UsageError(
            f"--table does not apply to `run`: the Scheduler at {spec} uses table "
            f"{scheduler.table!r}, not {given['table']!r}; have your code read "
            "DBSCHEDULER_TABLE to take it from the command line"
        )
