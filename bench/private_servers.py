"""The benchmark's own database servers: the test suite's throwaway PostgreSQL and MariaDB
(tests/servers/), PostgreSQL with a production server's settings, so that nothing the benchmark
measures runs on (or slows) a server the machine keeps for others."""

from __future__ import annotations

import sqlalchemy as sa

from bench.infra import log
from tests.servers import PrivateMariaDB as MariaDBServer
from tests.servers import PrivatePostgres as Server
from tests.servers import throwaway

__all__ = ["PrivateMariaDB", "PrivatePostgres"]

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


class PrivateMariaDB:
    """A throwaway MariaDB on a free port of 127.0.0.1, from the local binaries, with the
    settings Debian's package ships (InnoDB, 128 MB buffer pool, a flush at every commit).
    Removed at the end, also when the benchmark is killed."""

    def __init__(self) -> None:
        self.bin = MariaDBServer.binaries()
        self.server: MariaDBServer | None = None

    def start(self) -> str:
        """Start it; the admin URL (database ``test``)."""
        self.remove()
        log("starting a private MariaDB …")
        server = throwaway(MariaDBServer)
        assert isinstance(server, MariaDBServer)
        self.server = server
        log(f"private MariaDB on 127.0.0.1:{server.port} ({server.directory})")
        return server.url

    def remove(self) -> None:
        if self.server is not None:
            self.server.remove()
            self.server = None
