"""The Django app in this process: the database URL from ``DATABASES``, ``fenced(ctx)`` on
Django's own connection (SQLite and PostgreSQL), the dashboard behind the staff login, and the
management command's exit code.

Django is configured once for the whole module (settings are process-wide); its databases are a
SQLite file and a fresh PostgreSQL database, both dropped at the end.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import uuid
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import pytest
import sqlalchemy as sa

from dbscheduler import FixedDelay, LeaseLost, Scheduler, TaskContext
from dbscheduler.migrate import upgrade
from tests.databases import drop_table, unique_table

from .project import fresh_database, sqlalchemy_url, write_project

django = pytest.importorskip("django")


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    from django.conf import settings
    from django.core.management import call_command

    root = tmp_path_factory.mktemp("django")
    write_project(root / "project", with_tasks=False)
    sys.path.insert(0, str(root / "project"))
    with fresh_database("postgresql", root) as pg:
        databases = {"default": {"ENGINE": "django.db.backends.sqlite3",
                                 "NAME": str(root / "db.sqlite3")}, "pg": pg}
        table = unique_table()
        if settings.configured:
            pytest.fail("Django was configured before this module: its settings are its own")
        settings.configure(
            SECRET_KEY="not-secret", USE_TZ=True, ALLOWED_HOSTS=["testserver"],
            INSTALLED_APPS=["django.contrib.auth", "django.contrib.contenttypes",
                            "django.contrib.sessions", "dbscheduler.contrib.django", "shop"],
            DATABASES=databases, ROOT_URLCONF="proj_urls", MIDDLEWARE=[],
            DEFAULT_AUTO_FIELD="django.db.models.AutoField",
            PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"],
            DBSCHEDULER={"TABLE": table},
        )
        django.setup()
        for alias in databases:
            call_command("migrate", run_syncdb=True, verbosity=0, database=alias)
        try:
            yield {"databases": databases, "table": table}
        finally:
            from django.db import connections

            connections.close_all()
            sys.path.remove(str(root / "project"))


@pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")
def test_the_url_comes_from_databases(project: dict[str, Any]) -> None:
    from django.core.exceptions import ImproperlyConfigured
    from django.test import override_settings

    from dbscheduler.contrib.django import database_url

    pg = project["databases"]["pg"]
    assert database_url() == f"sqlite:///{project['databases']['default']['NAME']}"
    assert database_url("pg") == sqlalchemy_url(pg)
    mysql = {"ENGINE": "django.db.backends.mysql", "NAME": "app", "USER": "app",
             "PASSWORD": "p@ss", "HOST": "db", "PORT": "3306",
             "OPTIONS": {"charset": "utf8mb4", "isolation_level": "read committed"}}
    with override_settings(DATABASES={"default": mysql}):
        assert database_url() == "mysql+pymysql://app:p%40ss@db:3306/app?charset=utf8mb4"
    with override_settings(DBSCHEDULER={"DATABASE": "pg"}):
        assert database_url() == sqlalchemy_url(pg)
    with override_settings(DBSCHEDULER={"DATABSE": "pg"}), \
            pytest.raises(ImproperlyConfigured, match=r"unknown key.*'DATABSE'"):
        database_url()
    with override_settings(DBSCHEDULER={"DATABASE": "replica"}), \
            pytest.raises(ImproperlyConfigured, match="'replica', which DATABASES does not"):
        database_url()


@pytest.mark.parametrize("alias", ["default", "pg"])
def test_fenced_orm_writes_commit_only_under_the_lease(project: dict[str, Any],
                                                       alias: str) -> None:
    from django.db import connections
    from shop.models import Charge  # type: ignore[import-not-found]

    from dbscheduler.contrib.django import database_url, fenced

    url, table = database_url(alias), unique_table()
    engine = sa.create_engine(url)
    upgrade(engine, table)
    scheduler = Scheduler(url, table=table, lease=5)
    seen: dict[str, Any] = {}
    done = threading.Event()

    def steal_the_lease(ctx: TaskContext) -> None:
        # Another node took the task over: the row's token moved on.
        with engine.begin() as conn:
            conn.execute(sa.text(f"UPDATE {table} SET total_attempt = total_attempt + 1 "
                                 "WHERE queue_name = :name"), {"name": ctx.name})

    @scheduler.task("charge", schedule=FixedDelay(3600))
    def charge(ctx: TaskContext) -> None:
        try:
            with fenced(ctx, using=alias):
                Charge.objects.using(alias).create(note="kept")
            try:
                with fenced(ctx, connections[alias]):  # a connection works as its alias
                    Charge.objects.using(alias).create(note="rolled back")
                    raise RuntimeError("after the write")
            except RuntimeError:
                pass
            steal_the_lease(ctx)
            try:
                with fenced(ctx, using=alias):
                    Charge.objects.using(alias).create(note="zombie")
            except LeaseLost:
                seen["refused"] = True
            seen["autocommit"] = connections[alias].get_autocommit()
        finally:
            done.set()

    try:
        scheduler.start()
        scheduler.trigger("charge")
        assert done.wait(30), "the task did not run"
        notes = sorted(Charge.objects.using(alias).values_list("note", flat=True))
        assert notes == ["kept"]
        assert seen == {"refused": True, "autocommit": True}
    finally:
        scheduler.shutdown(timeout=5)
        engine.dispose()
        drop_table(url, table)


def test_fenced_refuses_to_run_inside_atomic(project: dict[str, Any]) -> None:
    from django.db import transaction

    from dbscheduler.contrib.django import fenced

    now = datetime.now(timezone.utc)
    ctx = TaskContext("t", "n", 1, 0, 1, now, now, now, None)
    with transaction.atomic(), pytest.raises(ValueError, match=r"inside transaction\.atomic"), \
            fenced(ctx):
        pass


def test_the_dashboard_serves_staff_only(project: dict[str, Any]) -> None:
    import httpx
    from django.contrib.auth.models import User
    from django.core.asgi import get_asgi_application
    from django.test import Client as DjangoClient

    from dbscheduler.contrib.django import database_url
    from dbscheduler.contrib.django.asgi import mount

    engine = sa.create_engine(database_url())
    upgrade(engine, project["table"])
    engine.dispose()
    staff = User.objects.create_user(f"staff-{uuid.uuid4().hex[:6]}", password="x",
                                     is_staff=True)
    plain = User.objects.create_user(f"user-{uuid.uuid4().hex[:6]}", password="x")

    def session_of(user: Any) -> str:
        client = DjangoClient()
        client.force_login(user)
        return str(client.cookies["sessionid"].value)

    application = mount(get_asgi_application(), "/scheduler/")

    async def get(path: str, session: str | None) -> httpx.Response:
        cookies = {"sessionid": session} if session else {}
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=application),
                                     base_url="http://testserver", cookies=cookies) as http:
            return await http.get(path)

    assert asyncio.run(get("/scheduler/api/tasks", None)).status_code == 401
    assert asyncio.run(get("/scheduler/api/tasks", session_of(plain))).status_code == 401
    served = asyncio.run(get("/scheduler/api/tasks", session_of(staff)))
    assert served.status_code == 200, served.text
    page = asyncio.run(get("/scheduler/", session_of(staff)))
    assert page.status_code == 200 and 'href="/scheduler/' in page.text
    assert asyncio.run(get("/elsewhere", None)).status_code == 404  # Django's own


def test_the_command_fails_with_the_clis_exit_code(project: dict[str, Any]) -> None:
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError) as raised:
        call_command("dbscheduler", "show", "no-such-task")
    assert raised.value.returncode == 1


def test_commands_get_the_projects_database_and_run_its_scheduler(
        project: dict[str, Any]) -> None:
    from dbscheduler.contrib.django import database_url
    from dbscheduler.contrib.django._cli import DJANGO_SPEC, django_args

    assert django_args(["run", "--log-level", "DEBUG"]) == [
        "run", DJANGO_SPEC, "--log-level", "DEBUG"]
    assert django_args(["run", "--url", "sqlite:///x.db", "app.tasks:scheduler"]) == [
        "run", "--url", "sqlite:///x.db", "app.tasks:scheduler"]
    assert django_args(["list", "--json"]) == [
        "--url", database_url(), "--table", project["table"], "list", "--json"]
