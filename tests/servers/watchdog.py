"""The watchdog: no private server outlives the process that wanted it.

``python -m tests.servers watch OWNER_PID OWNER_START DIRECTORY`` kills every server under
the directory and deletes it once the owner has gone; :func:`start_watchdog` starts one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.servers.base import ROOT, PrivateServer, process_start
from tests.servers.mariadb import PrivateMariaDB
from tests.servers.postgresql import PrivatePostgres


def start_watchdog(directory: Path, owner: int) -> None:
    """Kill every server under ``directory`` and delete it once process ``owner`` is gone;
    the watchdog ends by itself when the directory disappears (the owner cleaned up)."""
    started = process_start(owner)
    if started is None:
        raise RuntimeError(f"process {owner} is not running")
    # Its own session: the terminal's Ctrl-C or the end of pytest's process group spares it.
    subprocess.Popen(
        [sys.executable, "-m", "tests.servers", "watch", str(owner), started, str(directory)],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )


def kill_all_in(directory: Path) -> None:
    """End every server under ``directory``, at once."""
    # MariaDB's by its system database, not its pid file: a Galera joiner that never joined
    # has none, and its kill finds it by its data directory.
    for kind, marker in (("postgresql", "data/postmaster.pid"), ("mysql", "data/mysql")):
        for path in directory.glob(f"*/{marker}"):
            cls: type[PrivateServer] = PrivatePostgres if kind == "postgresql" else PrivateMariaDB
            cls(path.parent.parent).kill()


LINGER = 30.0
"""Seconds the watchdog goes on cleaning after the owner died: a test process of the owner's
may still be creating a server there (an xdist worker outlives its controller a moment)."""


def watch(owner: int, started: str, directory: Path) -> None:
    while directory.exists():
        if process_start(owner) != started:
            until = time.monotonic() + LINGER
            while time.monotonic() < until:
                kill_all_in(directory)
                shutil.rmtree(directory, ignore_errors=True)
                time.sleep(1.0)
            return
        time.sleep(0.5)


def throwaway(cls: type[PrivateServer], settings: dict[str, str] | None = None) -> PrivateServer:
    """A new server of ``cls`` in a temporary directory, watched for this process's death
    (:meth:`PrivateServer.remove` deletes it). Raises :class:`Unavailable` when it cannot start."""
    directory = Path(tempfile.mkdtemp(prefix=f"dbscheduler-{cls.kind}-"))
    directory.chmod(0o755)  # the server's own user walks into it
    start_watchdog(directory, os.getpid())
    server = cls(directory / cls.kind, settings)
    server.owned_root = directory
    try:
        server.create()
    except BaseException:
        server.kill()
        shutil.rmtree(directory, ignore_errors=True)
        raise
    return server
