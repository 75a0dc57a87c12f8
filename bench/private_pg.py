"""The benchmark's own PostgreSQL server: the test suite's throwaway server (tests/servers/)
with a production server's settings."""

from __future__ import annotations

import sqlalchemy as sa

from bench.infra import log
from tests.servers import PrivatePostgres as Server
from tests.servers import throwaway

__all__ = ["PrivatePostgres"]

SETTINGS = {
    "max_connections": "200", "shared_buffers": "128MB", "autovacuum": "on", "fsync": "on",
    "synchronous_commit": "on", "shared_preload_libraries": "pg_stat_statements",
    "pg_stat_statements.track_utility": "on", "timezone": "UTC",
}


class PrivatePostgres:
    """A throwaway PostgreSQL cluster on a free port of 127.0.0.1, from the local binaries.

    A production server's settings (fsync, synchronous commit and autovacuum on, 128 MB
    shared buffers) plus ``pg_stat_statements``, so statements are also counted by the server;
    and no test suite restarts it or shares its CPU budget mid-run. (The machine's own server
    may run with autovacuum off: measured there, every system walks past the dead rows of its
    own updates for the whole run.) Removed (killed, directory deleted) at the end, also when
    the benchmark is killed (the harness's watchdog).
    """

    def __init__(self) -> None:
        self.bin = Server.binaries()
        self.server: Server | None = None

    def start(self) -> str:
        """Start it; the admin URL (database ``postgres``)."""
        self.remove()
        log("starting a private PostgreSQL …")
        server = throwaway(Server, SETTINGS)
        assert isinstance(server, Server)
        self.server = server
        log(f"private PostgreSQL on 127.0.0.1:{server.port} ({server.directory})")
        engine = sa.create_engine(server.admin_url, isolation_level="AUTOCOMMIT",
                                  poolclass=sa.NullPool)
        with engine.connect() as conn:
            conn.exec_driver_sql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        engine.dispose()
        return server.admin_url

    def remove(self) -> None:
        if self.server is not None:
            self.server.remove()
            self.server = None
