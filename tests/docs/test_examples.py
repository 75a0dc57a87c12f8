"""Every example of the documentation runs, as shown, on the databases it names.

Each page with runnable steps (see ``tests/docs/pages.py`` for what runs and how) runs in a
process of its own, in an empty working directory. A page whose examples use the PostgreSQL
or MySQL placeholder URL gets a database of its own on that test server, dropped afterwards;
without the server it is skipped, or fails when ``DBSCHEDULER_REQUIRE_DATABASES`` names it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.databases import find, required
from tests.docs.pages import DOCS, PLACEHOLDERS, backends, pages_with_steps, steps

ROOT = DOCS.parent
PAGES = pages_with_steps()


@contextmanager
def fresh_database(backend: str) -> Iterator[str]:
    """A URL of a new, empty database on the test server of ``backend``; dropped after."""
    found = find(backend)
    if found.url is None:
        if backend in required():
            pytest.fail(f"DBSCHEDULER_REQUIRE_DATABASES names {backend}, but {found.reason}")
        pytest.skip(found.reason)
    server = sa.engine.make_url(found.url)
    name = f"docs_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f"CREATE DATABASE {name}"))
    try:
        yield server.set(database=name).render_as_string(hide_password=False)
    finally:
        drop = f"DROP DATABASE {name}" + (" WITH (FORCE)" if backend == "postgresql" else "")
        with admin.connect() as conn:
            conn.execute(sa.text(drop))
        admin.dispose()


def test_every_page_with_examples_is_found() -> None:
    names = {p.relative_to(DOCS).as_posix() for p in PAGES}
    assert {"getting-started/index.md", "getting-started/postgresql.md"} <= names


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(DOCS).as_posix() for p in PAGES])
def test_page_examples_run(page: Path, tmp_path: Path) -> None:
    with ExitStack() as stack:
        urls = {PLACEHOLDERS[b]: stack.enter_context(fresh_database(b)) for b in backends(page)}
        env = {**os.environ, "DOCS_URLS": json.dumps(urls),
               "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        env.pop("DBSCHEDULER_URL", None)
        env.pop("DBSCHEDULER_TABLE", None)
        proc = subprocess.run(
            [sys.executable, "-m", "tests.docs.run_page", str(page)],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180,
        )
    assert proc.returncode == 0, (
        f"the examples of docs/{page.relative_to(DOCS)} ({len(steps(page))} steps) failed:\n"
        f"{proc.stdout}{proc.stderr}"
    )
