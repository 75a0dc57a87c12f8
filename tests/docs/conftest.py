"""The site build starts with the first docs test and runs while the examples run: most of
their time is spent waiting for tasks to fall due, the build's is spent computing."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session", autouse=True)
def site_build(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    """``mkdocs build --strict`` of the whole site, started in the background."""
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.Popen(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet",
         "--config-file", str(ROOT / "mkdocs.yml"), "--site-dir", str(out)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    yield proc, out
    if proc.poll() is None:
        proc.kill()
    proc.communicate()
