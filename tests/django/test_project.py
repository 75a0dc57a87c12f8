"""A real Django project gets periodic tasks: ``INSTALLED_APPS += ["dbscheduler.contrib.django"]``,
an app's ``tasks.py``, ``python manage.py dbscheduler migrate`` and ``python manage.py
dbscheduler run`` (a real process), on SQLite and PostgreSQL. The task writes through Django's
ORM inside ``fenced(ctx)``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from tests.helpers import wait_until

from .project import fresh_database, sqlalchemy_url, write_project


def manage(project: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "manage.py", *args], cwd=project, env=env,
                          capture_output=True, text=True, timeout=120)


def project_env(database: dict[str, Any], **extra: Any) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("DBSCHEDULER_URL", "DBSCHEDULER_TABLE", "DJANGO_SETTINGS_MODULE")}
    env["TEST_DJANGO_DATABASES"] = json.dumps({"default": database})
    env["TEST_DBSCHEDULER"] = json.dumps(extra)
    return env


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_manage_py_dbscheduler_migrate_and_run_a_projects_tasks(backend: str,
                                                                tmp_path: Path) -> None:
    project = write_project(tmp_path / "project")
    with fresh_database(backend, tmp_path) as database:
        env = project_env(database)
        done = manage(project, env, "migrate", "--run-syncdb", "-v", "0")
        assert done.returncode == 0, done.stderr
        done = manage(project, env, "dbscheduler", "migrate")
        assert done.returncode == 0, done.stderr
        assert "upgraded table scheduled_tasks" in done.stdout, done.stdout

        node = subprocess.Popen([sys.executable, "manage.py", "dbscheduler", "run"],
                                cwd=project, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        engine = sa.create_engine(sqlalchemy_url(database))
        try:
            def charges() -> list[Any]:
                with engine.connect() as conn:
                    return list(conn.execute(sa.text("SELECT note, token FROM shop_charge")))

            def succeeded() -> int:
                with engine.connect() as conn:
                    return int(conn.execute(sa.text(
                        "SELECT count(*) FROM scheduled_tasks_runs "
                        "WHERE task_name = 'charge' AND status = 'success'")).scalar_one())

            wait_until(lambda: node.poll() is not None or succeeded() >= 2, timeout=60,
                       what="two successful runs of the task declared in shop/tasks.py")
            assert node.poll() is None, node.communicate()[0]
            node.send_signal(signal.SIGINT)
            output = node.communicate(timeout=60)[0]
            assert node.returncode == 0, output
            written = charges()
            assert len(written) >= 2 and {note for note, _ in written} == {"charged"}
            # Each run's ORM write committed with its own fence, under its own token.
            assert len({token for _, token in written}) == len(written)
        finally:
            if node.poll() is None:
                os.killpg(node.pid, signal.SIGKILL)
                node.wait()
            engine.dispose()
