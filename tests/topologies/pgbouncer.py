"""A throwaway PgBouncer in front of the test PostgreSQL: stock settings, trust auth, on a free
port, in a temporary directory; stopped and removed when the test ends."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import sqlalchemy as sa

BINARY = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
INSTALL = "apt-get install -y pgbouncer"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def pgbouncer(server_url: str, mode: str) -> Iterator[str]:
    """A URL like ``server_url`` that goes through a PgBouncer in ``mode`` pooling
    (``transaction`` or ``session``); skips when PgBouncer is not installed."""
    if not os.path.exists(BINARY):
        pytest.skip(f"PgBouncer is not installed ({INSTALL})")
    server = sa.engine.make_url(server_url)
    port = _free_port()
    work = Path(tempfile.mkdtemp(prefix="dbs-pgbouncer-"))
    user = server.username or "postgres"
    (work / "users.txt").write_text(f'"{user}" ""\n')
    (work / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"{server.database} = host={server.host or '127.0.0.1'} port={server.port or 5432} "
        f"dbname={server.database}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {work / 'users.txt'}\n"
        f"pool_mode = {mode}\nmax_client_conn = 200\ndefault_pool_size = 20\n"
        f"logfile = {work / 'pgbouncer.log'}\npidfile = {work / 'pgbouncer.pid'}\n"
    )
    # PgBouncer refuses to run as root.
    as_user = ["-u", "postgres"] if os.geteuid() == 0 else []
    if as_user:
        shutil.chown(work, "postgres")
        for f in work.iterdir():
            shutil.chown(f, "postgres")
    proc = subprocess.Popen([BINARY, *as_user, str(work / "pgbouncer.ini")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    err = proc.stderr.read().decode() if proc.stderr else ""
                    pytest.fail(f"PgBouncer did not start: {err}")
                time.sleep(0.05)
        yield server.set(host="127.0.0.1", port=port).render_as_string(hide_password=False)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(work, ignore_errors=True)
