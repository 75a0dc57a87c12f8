"""The ``DBSCHEDULER`` setting, the database URL from ``DATABASES``, the project's scheduler
and the discovery of ``<app>/tasks.py``."""

from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from django.apps import apps
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS
from django.utils.module_loading import module_has_submodule

from ...table import DEFAULT_TABLE, split_table_name

if TYPE_CHECKING:
    from ...client import Client
    from ...scheduler import Scheduler

__all__ = ["Settings", "autodiscover", "database_url", "get_client", "get_scheduler",
           "settings_of"]

_KEYS = ("DATABASE", "URL", "TABLE", "TASKS_MODULE", "OPTIONS")


@dataclass(frozen=True)
class Settings:
    """The ``DBSCHEDULER`` setting, checked, with its defaults filled in."""

    database: str = DEFAULT_DB_ALIAS
    url: str | None = None
    table: str = DEFAULT_TABLE
    tasks_module: str = "tasks"
    options: dict[str, Any] = field(default_factory=dict)


def settings_of() -> Settings:
    """The project's ``DBSCHEDULER`` setting; a mistake in it raises ``ImproperlyConfigured``
    naming the key and what to write.

    >>> settings_of().table  # doctest: +SKIP
    'scheduled_tasks'
    """
    given = getattr(settings, "DBSCHEDULER", {})
    if not isinstance(given, dict):
        raise ImproperlyConfigured(
            f"DBSCHEDULER must be a dict such as {{'DATABASE': 'default'}}, got "
            f"{type(given).__name__}"
        )
    unknown = sorted(set(given) - set(_KEYS))
    if unknown:
        raise ImproperlyConfigured(
            f"DBSCHEDULER has unknown key(s) {', '.join(map(repr, unknown))}; the keys are "
            f"{', '.join(_KEYS)}"
        )
    made = Settings(
        database=given.get("DATABASE", DEFAULT_DB_ALIAS),
        url=given.get("URL"),
        table=given.get("TABLE", DEFAULT_TABLE),
        tasks_module=given.get("TASKS_MODULE", "tasks"),
        options=dict(given.get("OPTIONS", {})),
    )
    if made.url is None and made.database not in settings.DATABASES:
        raise ImproperlyConfigured(
            f"DBSCHEDULER['DATABASE'] is {made.database!r}, which DATABASES does not have "
            f"(it has {', '.join(map(repr, settings.DATABASES))})"
        )
    try:
        split_table_name(made.table)
    except ValueError as exc:
        raise ImproperlyConfigured(f"DBSCHEDULER['TABLE']: {exc}") from None
    for reserved in ("url", "engine", "table"):
        if reserved in made.options:
            raise ImproperlyConfigured(
                f"DBSCHEDULER['OPTIONS'] must not hold {reserved!r}: it comes from "
                f"DBSCHEDULER['{'URL' if reserved != 'table' else 'TABLE'}'] or DATABASES"
            )
    return made


# Keys of a database's OPTIONS that are Django's own, not the driver's.
_DJANGO_OPTIONS = frozenset({"isolation_level", "server_side_binding", "pool", "assume_role",
                             "init_command", "transaction_mode", "timeout",
                             "check_same_thread"})


def database_url(alias: str | None = None) -> str:
    """The SQLAlchemy URL of a database in ``DATABASES`` (default: the one the
    ``DBSCHEDULER`` setting names, else ``default``).

    SQLite, PostgreSQL, MySQL/MariaDB and Oracle are read from their Django settings; for any
    other engine set ``DBSCHEDULER = {"URL": ...}``.

    >>> database_url()  # doctest: +SKIP
    'postgresql+psycopg://app:***@db:5432/app'
    """
    chosen = settings_of()
    if alias is None and chosen.url is not None:
        return chosen.url
    alias = alias or chosen.database
    try:
        db = settings.DATABASES[alias]
    except KeyError:
        raise ImproperlyConfigured(f"DATABASES has no alias {alias!r}") from None
    engine = db.get("ENGINE", "")
    name = db.get("NAME") or None
    options = {k: v for k, v in (db.get("OPTIONS") or {}).items()
               if k not in _DJANGO_OPTIONS and isinstance(v, str | int)}
    user, password = db.get("USER") or None, db.get("PASSWORD") or None
    host, port = db.get("HOST") or None, int(db["PORT"]) if db.get("PORT") else None
    url: sa.URL
    if engine.endswith("sqlite3") or engine.endswith("spatialite"):
        database = str(name or "")
        if not database or database == ":memory:" or "mode=memory" in database:
            raise ImproperlyConfigured(
                f"DATABASES[{alias!r}] is an in-memory SQLite database, which other "
                "processes cannot share; give it a file NAME, or set DBSCHEDULER['URL']"
            )
        url = sa.URL.create("sqlite", database=str(Path(database).resolve()))
    elif engine.endswith(("postgresql", "postgis")):
        url = sa.URL.create(f"postgresql+{_postgres_driver()}", user, password, host, port,
                            name, query={k: str(v) for k, v in options.items()})
    elif engine.endswith("mysql"):
        url = sa.URL.create("mysql+pymysql", user, password, host, port, name,
                            query={k: str(v) for k, v in options.items()
                                   if k in ("charset", "unix_socket", "read_default_file")})
    elif engine.endswith("oracle"):
        url = (sa.URL.create("oracle+oracledb", user, password, host, port,
                             query={"service_name": str(name)}) if host
               else sa.URL.create("oracle+oracledb", user, password, name))
    else:
        raise ImproperlyConfigured(
            f"DATABASES[{alias!r}] uses {engine!r}, whose settings dbscheduler cannot read; "
            "set DBSCHEDULER = {'URL': '<SQLAlchemy URL of that database>'}"
        )
    return url.render_as_string(hide_password=False)


def _postgres_driver() -> str:
    """The driver Django uses for PostgreSQL: psycopg 3 when installed, else psycopg2."""
    try:
        importlib.import_module("psycopg")
    except ImportError:
        return "psycopg2"
    return "psycopg"


_lock = threading.Lock()
_scheduler: Scheduler | None = None
_client: Client | None = None


def get_scheduler() -> Scheduler:
    """The project's :class:`~dbscheduler.Scheduler` (``dbscheduler.contrib.django.scheduler``),
    made on first use from the settings; the same object every time.

    >>> from dbscheduler.contrib.django import get_scheduler
    >>> get_scheduler() is get_scheduler()  # doctest: +SKIP
    True
    """
    global _scheduler
    with _lock:
        if _scheduler is None:
            from ...scheduler import Scheduler

            chosen = settings_of()
            _scheduler = Scheduler(database_url(), table=chosen.table, **chosen.options)
        return _scheduler


def get_client() -> Client:
    """A :class:`~dbscheduler.Client` on the project's table, for web views and scripts that
    run no tasks (``get_client().trigger("nightly-report")``)."""
    global _client
    with _lock:
        if _client is None:
            from ...client import Client

            _client = Client(database_url(), table=settings_of().table)
        return _client


def autodiscover() -> list[str]:
    """Import ``<app>.tasks`` (``DBSCHEDULER['TASKS_MODULE']``) of every installed app that
    has one, so their tasks are declared on the project's scheduler; the modules imported.

    ``python manage.py dbscheduler run`` calls it; call it yourself where you need the
    declared tasks in another process (a test, a custom command).

    >>> autodiscover()  # doctest: +SKIP
    ['shop.tasks', 'billing.tasks']
    """
    name = settings_of().tasks_module
    found = []
    for config in apps.get_app_configs():
        if module_has_submodule(config.module, name):
            importlib.import_module(f"{config.name}.{name}")
            found.append(f"{config.name}.{name}")
    return found


def discovered_scheduler() -> Scheduler:
    """The project's scheduler once every app's tasks module is imported: what
    ``manage.py dbscheduler run`` and ``sync`` load."""
    autodiscover()
    return get_scheduler()
