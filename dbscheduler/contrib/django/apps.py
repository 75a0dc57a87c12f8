"""The Django app configuration of :mod:`dbscheduler.contrib.django`."""

from __future__ import annotations

from django.apps import AppConfig


class DbschedulerConfig(AppConfig):  # type: ignore[misc]  # Django ships no types
    """``INSTALLED_APPS += ["dbscheduler.contrib.django"]``: the ``dbscheduler`` management
    command, and the project's scheduler from its settings."""

    name = "dbscheduler.contrib.django"
    label = "dbscheduler"
    verbose_name = "dbscheduler"

    def ready(self) -> None:
        from ._settings import settings_of

        settings_of()  # a mistake in DBSCHEDULER shows at start-up, not at the first task
