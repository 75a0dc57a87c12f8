"""A real Django project written into a temporary directory: settings, ``manage.py``, and an
app ``shop`` whose ``tasks.py`` declares a task that writes through the ORM, fenced."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from tests.conftest import backend_url

MANAGE = """\
import os, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "proj_settings")
from django.core.management import execute_from_command_line
execute_from_command_line(sys.argv)
"""

SETTINGS = """\
import json, os
from pathlib import Path
SECRET_KEY = "not-secret"
USE_TZ = True
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "dbscheduler.contrib.django",
    "shop",
]
ROOT_URLCONF = "proj_urls"
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
DATABASES = json.loads(os.environ["TEST_DJANGO_DATABASES"])
DBSCHEDULER = json.loads(os.environ.get("TEST_DBSCHEDULER", "{}"))
"""

MODELS = """\
from django.db import models


class Charge(models.Model):
    note = models.CharField(max_length=100)
    token = models.IntegerField(default=0)
"""

TASKS = """\
from dbscheduler import FixedDelay, TaskContext
from dbscheduler.contrib.django import fenced, scheduler

from shop.models import Charge


@scheduler.task("charge", schedule=FixedDelay(0.2))
def charge(ctx: TaskContext) -> None:
    with fenced(ctx):
        Charge.objects.create(note="charged", token=ctx.total_attempt)
"""


def write_project(root: Path, with_tasks: bool = True) -> Path:
    """The project's files under ``root`` (its directory, to put on ``sys.path``)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "manage.py").write_text(MANAGE)
    (root / "proj_settings.py").write_text(SETTINGS)
    (root / "proj_urls.py").write_text("urlpatterns = []\n")
    shop = root / "shop"
    shop.mkdir()
    (shop / "__init__.py").write_text("")
    (shop / "models.py").write_text(MODELS)
    if with_tasks:
        (shop / "tasks.py").write_text(TASKS)
    return root


def django_database(backend: str, tmp_path: Path) -> dict[str, Any]:
    """``DATABASES["default"]`` for a database on ``backend`` (SQLite: a file in tmp_path)."""
    if backend == "sqlite":
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": str(tmp_path / "db.sqlite3")}
    url = sa.engine.make_url(backend_url(backend, tmp_path))
    return {"ENGINE": "django.db.backends.postgresql", "NAME": url.database,
            "USER": url.username or "", "PASSWORD": url.password or "",
            "HOST": url.host or "", "PORT": str(url.port or "")}


@contextmanager
def fresh_database(backend: str, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A new, empty database on ``backend``'s test server (SQLite: a new file), dropped
    afterwards: Django's own tables (auth, sessions) must not meet another test's."""
    settings = django_database(backend, tmp_path)
    if backend == "sqlite":
        yield settings
        return
    server = sa.engine.make_url(backend_url(backend, tmp_path))
    name = f"dj_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f"CREATE DATABASE {name}"))
    try:
        yield {**settings, "NAME": name}
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f"DROP DATABASE {name} WITH (FORCE)"))
        admin.dispose()


def sqlalchemy_url(database: dict[str, Any]) -> str:
    """The same database as a SQLAlchemy URL, for the test's own checks."""
    if database["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{database['NAME']}"
    return sa.URL.create("postgresql+psycopg", database["USER"] or None,
                         database["PASSWORD"] or None, database["HOST"] or None,
                         int(database["PORT"]) if database["PORT"] else None,
                         database["NAME"]).render_as_string(hide_password=False)
