"""A private PostgreSQL primary with one streaming standby, for failover scenarios: both from
the installed binaries (:mod:`tests.servers`), in one temporary directory watched for this
process's death, removed together."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.chaos.faults import TcpProxy
from tests.servers import PrivatePostgres, Unavailable, throwaway
from tests.servers.base import _give_to


class PrivateStandby(PrivatePostgres):
    """A standby of ``primary``, copied with ``pg_basebackup`` and streaming from it under the
    name ``name`` (what ``synchronous_standby_names`` refers to)."""

    def __init__(self, directory: Path, primary: PrivatePostgres, name: str,
                 via: int | None = None) -> None:
        super().__init__(directory)
        self.primary = primary
        self.name = name
        self.via = via
        """The port its replication connection goes through (a proxy), else the primary's."""

    def _initialise(self) -> None:
        _give_to(self.directory, self._user)
        self._run(str(self._bin() / "pg_basebackup"), "-h", "127.0.0.1",
                  "-p", str(self.primary.port), "-U", "postgres", "-D", str(self._data),
                  "-R", "-X", "stream", "-c", "fast", "--no-sync")
        with open(self._data / "postgresql.auto.conf", "a") as conf:
            port = self.via or self.primary.port
            conf.write(f"primary_conninfo = 'host=127.0.0.1 port={port} "
                       f"user=postgres application_name={self.name}'\n")

    def _create_database(self) -> None:
        """Replicated from the primary."""

    def promote(self) -> None:
        """Make it the primary (``pg_ctl promote``, waiting until it accepts writes)."""
        self._run(str(self._bin() / "pg_ctl"), "-D", str(self._data), "-w", "promote")


@dataclass
class Pair:
    primary: PrivatePostgres
    standby: PrivateStandby
    link: TcpProxy
    """What carries the standby's replication stream: ``link.set_mode("blackhole")`` makes it
    fall behind, as a slow network does."""

    @property
    def url(self) -> str:
        """Both hosts, the writable one chosen: what a node of a HA service is given."""
        return (f"postgresql+psycopg://postgres@/{self.primary.database}"
                f"?host=127.0.0.1:{self.primary.port}&host=127.0.0.1:{self.standby.port}"
                "&target_session_attrs=read-write&connect_timeout=2")


@contextmanager
def primary_and_standby(synchronous: bool) -> Iterator[Pair]:
    """A primary and its standby, replicating synchronously or not; skips where PostgreSQL's
    binaries are missing."""
    try:
        primary = throwaway(PrivatePostgres)
    except Unavailable as exc:
        pytest.skip(str(exc))
    assert isinstance(primary, PrivatePostgres) and primary.owned_root is not None
    link = TcpProxy("127.0.0.1", primary.port)
    try:
        standby = PrivateStandby(primary.owned_root / "standby", primary, "standby1",
                                 via=link.port)
        standby.create()
        if synchronous:
            engine = sa.create_engine(primary.admin_url, isolation_level="AUTOCOMMIT",
                                      poolclass=sa.pool.NullPool)
            with engine.connect() as conn:
                conn.exec_driver_sql("ALTER SYSTEM SET synchronous_standby_names = 'standby1'")
                conn.exec_driver_sql("SELECT pg_reload_conf()")
            engine.dispose()
        yield Pair(primary, standby, link)
    finally:
        link.close()
        primary.remove()
