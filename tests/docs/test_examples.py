"""Every example of the documentation runs, as shown, on the databases it names.

Each page with runnable steps (``tests/docs/pages.py`` says what runs and how) runs in a
process of its own, in an empty working directory. A page whose examples use the PostgreSQL
or MySQL placeholder URL gets a database of its own on that test server, dropped afterwards;
without the server it is skipped, or fails when ``DBSCHEDULER_REQUIRE_DATABASES`` names it.

The selected pages run four at a time, the longest first (most of their time is spent
waiting for tasks to fall due), forked by one runner process that imports the library once;
each page is still its own test.
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
from typing import Any

import pytest
import sqlalchemy as sa

from tests.databases import find, required
from tests.docs.conftest import exclusive, finish_build, shared_dir, start_build
from tests.docs.pages import DOCS, PLACEHOLDERS, backends, pages_with_steps, steps

ROOT = DOCS.parent
PAGES = pages_with_steps()


class NoServer(Exception):
    """The page needs a database server the tests cannot reach."""


@contextmanager
def fresh_database(backend: str) -> Iterator[str]:
    """A URL of a new, empty database on the test server of ``backend``; dropped after."""
    found = find(backend)
    if found.url is None:
        raise NoServer(backend, found.reason)
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


def weight(page: Path) -> int:
    """A rough guess of how long a page's examples take: commands that run until stopped,
    servers, then the number of steps."""
    text = page.read_text()
    return (100 * text.count("<!-- test-shell:") + 50 * text.count(" &\n")
            + 20 * len(backends(page)) + len(steps(page)))


def run_pages(pages: list[Path], directory: Path) -> dict[str, dict[str, Any]]:
    """Run ``pages`` (one process forking a child per page), each with fresh databases for
    the servers it names: ``{page: {"returncode", "output", "seconds"} or {"skip", ...}}``."""
    out: dict[str, dict[str, Any]] = {}
    with ExitStack() as stack:
        jobs: list[dict[str, Any]] = []
        for page in pages:
            try:
                urls = {PLACEHOLDERS[b]: stack.enter_context(fresh_database(b))
                        for b in backends(page)}
            except NoServer as exc:
                out[str(page)] = {"skip": exc.args[1], "backend": exc.args[0]}
                continue
            jobs.append({"page": str(page), "urls": urls})
        jobs.sort(key=lambda job: -weight(Path(job["page"])))  # the longest first
        (directory / "jobs.json").write_text(json.dumps(jobs))
        env = {**os.environ,
               "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        env.pop("DBSCHEDULER_URL", None)
        env.pop("DBSCHEDULER_TABLE", None)
        proc = subprocess.run(
            [sys.executable, "-m", "tests.docs.run_page", str(directory / "jobs.json"),
             str(directory / "results.json")],
            cwd=directory, env=env, capture_output=True, text=True, timeout=600,
        )
        assert proc.returncode == 0, f"the page runner failed:\n{proc.stdout}{proc.stderr}"
        out.update(json.loads((directory / "results.json").read_text()))
    took = {Path(p).relative_to(DOCS).as_posix(): r.get("seconds") for p, r in out.items()}
    print("docs examples, seconds per page:", took)
    return out


@pytest.fixture(scope="module")
def outcomes(request: pytest.FixtureRequest,
             tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """The results of every selected page, made by the first worker that needs them."""
    items = [item for item in request.session.items if isinstance(item, pytest.Function)]
    pages = [Path(str(item.callspec.params["page"])) for item in items
             if item.module is request.module and hasattr(item, "callspec")]
    site_selected = any(item.module is not None and item.module.__name__.endswith("test_site")
                        for item in items)
    shared = shared_dir(tmp_path_factory)
    with exclusive(shared):
        recorded = shared / "examples.json"
        if recorded.exists():
            results: dict[str, dict[str, Any]] = json.loads(recorded.read_text())
            return results
        build = start_build(shared) if site_selected and not (shared / "site.json").exists() \
            else None
        try:
            results = run_pages(pages, shared)
        finally:
            if build is not None:
                finish_build(shared, build)
        recorded.write_text(json.dumps(results))
        return results


def test_every_page_with_examples_is_found() -> None:
    names = {p.relative_to(DOCS).as_posix() for p in PAGES}
    assert {"index.md", "getting-started/index.md", "getting-started/postgresql.md"} <= names


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(DOCS).as_posix() for p in PAGES])
def test_page_examples_run(page: Path, outcomes: dict[str, dict[str, Any]]) -> None:
    outcome = outcomes[str(page)]
    if "skip" in outcome:
        if outcome["backend"] in required():
            pytest.fail(f"DBSCHEDULER_REQUIRE_DATABASES names {outcome['backend']}, "
                        f"but {outcome['skip']}")
        pytest.skip(outcome["skip"])
    assert outcome["returncode"] == 0, (
        f"the examples of docs/{page.relative_to(DOCS)} ({len(steps(page))} steps) failed:\n"
        f"{outcome['output']}"
    )
