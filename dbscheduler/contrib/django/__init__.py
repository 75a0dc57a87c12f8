"""dbscheduler as a Django app: periodic tasks on the project's own database.

In ``settings.py``::

    INSTALLED_APPS += ["dbscheduler.contrib.django"]
    # optional; the defaults are shown
    DBSCHEDULER = {
        "DATABASE": "default",        # the DATABASES alias whose database holds the table
        "URL": None,                  # or a SQLAlchemy URL, instead of DATABASE
        "TABLE": "scheduled_tasks",
        "TASKS_MODULE": "tasks",      # <app>/tasks.py of every installed app
        "OPTIONS": {},                # more Scheduler arguments: max_workers, lease, tags, ...
    }

In ``<app>/tasks.py``::

    from dbscheduler import Cron, TaskContext
    from dbscheduler.contrib.django import fenced, scheduler

    @scheduler.task("nightly-report", schedule=Cron("0 3 * * *", tz="Europe/Berlin"))
    def nightly_report(ctx: TaskContext) -> None:
        with fenced(ctx):             # the ORM's writes commit only under the lease
            Report.objects.create(...)

Then ``python manage.py dbscheduler migrate`` and ``python manage.py dbscheduler run``; every
command of the ``dbscheduler`` CLI works the same way, on the project's database. The dashboard
behind Django's staff login: :func:`dbscheduler.contrib.django.asgi.mount`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._fence import fenced
from ._settings import autodiscover, database_url, get_client, get_scheduler, settings_of

if TYPE_CHECKING:
    from ...scheduler import Scheduler

    scheduler: Scheduler
    """The project's :class:`~dbscheduler.Scheduler`, made on first use from the settings."""

__all__ = ["autodiscover", "database_url", "fenced", "get_client", "get_scheduler",
           "scheduler", "settings_of"]


def __getattr__(name: str) -> Any:
    # Made on first use, not on import: Django imports this package while it loads its apps.
    if name == "scheduler":
        return get_scheduler()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
