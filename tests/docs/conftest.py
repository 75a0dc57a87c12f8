"""What the docs tests share: the site build and the examples' results, made once per run.

Under pytest-xdist each worker collects every test, and the docs tests may be spread over
several workers; the first worker that needs the examples' results (or the site) makes them,
holding a lock in the run's shared temporary directory, and the others read them. The site
build starts in the background before the examples run (when the site tests are selected
too): most of the examples' time is spent waiting for tasks to fall due, the build's
computing.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def shared_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory every xdist worker of this run sees (the run's own without xdist)."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    path = shared / "docs"
    path.mkdir(exist_ok=True)
    return path


@contextmanager
def exclusive(directory: Path) -> Iterator[None]:
    """Held by one worker at a time: whoever holds it first makes what the others read."""
    with open(directory / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def start_build(directory: Path) -> subprocess.Popen[str]:
    """``mkdocs build --strict`` of the whole site into ``directory/site``."""
    return subprocess.Popen(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet",
         "--config-file", str(ROOT / "mkdocs.yml"), "--site-dir", str(directory / "site")],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )


def finish_build(directory: Path, build: subprocess.Popen[str]) -> dict[str, Any]:
    """Wait for the build and record how it went (``directory/site.json``)."""
    try:
        output, _ = build.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        build.kill()
        output, _ = build.communicate()
        output += "\nmkdocs build did not end within 300 s"
    result = {"returncode": build.returncode, "output": output,
              "site": str(directory / "site")}
    (directory / "site.json").write_text(json.dumps(result))
    return result
