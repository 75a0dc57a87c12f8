"""The benchmark's own PostgreSQL server: a throw-away cluster built with the local binaries."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import sqlalchemy as sa

from bench.infra import PRIVATE_PG_PORT, log

__all__ = ["PrivatePostgres"]


class PrivatePostgres:
    """A throw-away PostgreSQL cluster on 127.0.0.1:55432, from the local server's binaries.

    A production server's settings (fsync, synchronous commit and autovacuum on, 128 MB
    shared buffers) plus ``pg_stat_statements``, so statements are also counted by the server;
    and no other test suite restarts it or shares its CPU budget mid-run. (The shared test
    server runs with autovacuum off: measured there, every system walks past the dead rows of
    its own updates for the whole run.) Removed (stopped, data directory deleted) at the end.
    """

    def __init__(self, port: int = PRIVATE_PG_PORT) -> None:
        self.port = port
        self.bin = self.find_bin()
        self.data = Path(tempfile.gettempdir()) / f"dbsbench-pg-{port}"
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
        self.started = False

    @staticmethod
    def find_bin() -> Path | None:
        candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), reverse=True)
        return candidates[0].parent if candidates else None

    def _as_postgres(self, *cmd: str) -> list[str]:
        if os.geteuid() == 0:
            return ["runuser", "-u", "postgres", "--", *cmd]
        return list(cmd)

    def start(self) -> str:
        assert self.bin is not None
        self.stop()
        subprocess.run(["rm", "-rf", str(self.data)], check=True)
        self.data.mkdir(parents=True)
        if os.geteuid() == 0:
            subprocess.run(["chown", "postgres:postgres", str(self.data)], check=True)
        log(f"starting a private PostgreSQL ({self.bin.parent.name}) on 127.0.0.1:{self.port} …")
        subprocess.run(self._as_postgres(str(self.bin / "initdb"), "-D", str(self.data), "-A",
                                         "trust", "-U", "postgres", "-E", "UTF8"),
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        options = " ".join([
            f"-c port={self.port}", "-c listen_addresses=127.0.0.1",
            "-c unix_socket_directories=/tmp", "-c max_connections=200",
            "-c shared_buffers=128MB", "-c autovacuum=on", "-c fsync=on",
            "-c synchronous_commit=on", "-c shared_preload_libraries=pg_stat_statements",
            "-c pg_stat_statements.track_utility=on", "-c timezone=UTC",
        ])
        subprocess.run(self._as_postgres(str(self.bin / "pg_ctl"), "-D", str(self.data), "-w",
                                         "-l", str(self.data / "server.log"), "-o", options,
                                         "start"),
                       check=True, stdout=subprocess.DEVNULL, timeout=60)
        self.started = True
        engine = sa.create_engine(self.url, isolation_level="AUTOCOMMIT", poolclass=sa.NullPool)
        with engine.connect() as conn:
            conn.exec_driver_sql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        engine.dispose()
        return self.url

    def stop(self) -> None:
        if self.bin is None or not (self.data / "postmaster.pid").exists():
            return
        subprocess.run(self._as_postgres(str(self.bin / "pg_ctl"), "-D", str(self.data), "-w",
                                         "-m", "immediate", "stop"),
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
        self.started = False

    def remove(self) -> None:
        self.stop()
        subprocess.run(["rm", "-rf", str(self.data)], check=False)
