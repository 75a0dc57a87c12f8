"""A throwaway PostgreSQL server."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import sqlalchemy as sa

from tests.servers.base import (
    INSTALL,
    START_TIMEOUT,
    PrivateServer,
    Unavailable,
    _as_user,
    _give_to,
    _pid_in,
    _tail,
    _user_exists,
    alive,
)


class PrivatePostgres(PrivateServer):
    """PostgreSQL from the newest installed version's ``initdb`` and ``pg_ctl``, run as the
    ``postgres`` user when we are root; trust authentication for user ``postgres``; every
    setting as the server ships it, except those passed in ``settings``."""

    kind = "postgresql"
    label = "PostgreSQL"
    # SIGQUIT is PostgreSQL's immediate shutdown: the postmaster takes its backends with it.
    crash_signal = signal.SIGQUIT

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{self.database}"

    @property
    def admin_url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    @staticmethod
    def binaries() -> Path | None:
        """The directory of ``initdb`` and ``pg_ctl``, None when PostgreSQL is not installed."""
        def version(path: Path) -> tuple[int, ...]:
            name = path.parent.parent.name
            return tuple(int(p) for p in name.split(".") if p.isdigit())

        found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=version)
        if found:
            return found[-1].parent
        initdb = shutil.which("initdb")
        return Path(initdb).parent if initdb else None

    def _bin(self) -> Path:
        found = self.binaries()
        if found is None:
            raise Unavailable(f"PostgreSQL's server binaries (initdb, pg_ctl) are not installed; "
                              f"install them with: {INSTALL}")
        return found

    @property
    def _user(self) -> str | None:
        return "postgres" if os.geteuid() == 0 else None

    @property
    def _data(self) -> Path:
        return self.directory / "data"

    def pid(self) -> int | None:
        pid = _pid_in(self._data / "postmaster.pid")
        return pid if pid is not None and alive(pid) else None

    def _run(self, *cmd: str, timeout: float = START_TIMEOUT) -> None:
        log = self.directory / "commands.log"
        with open(log, "ab") as out:
            done = subprocess.run(_as_user(self._user, list(cmd)), stdin=subprocess.DEVNULL,
                                  stdout=out, stderr=out, timeout=timeout, check=False)
        if done.returncode != 0:
            raise Unavailable(f"{Path(cmd[0]).name} failed ({done.returncode}): {_tail(log)}; "
                              f"server log: {_tail(self.directory / 'server.log')}")

    def _initialise(self) -> None:
        if os.geteuid() == 0 and not _user_exists("postgres"):
            raise Unavailable("running as root, PostgreSQL needs its 'postgres' user; "
                              f"install the server with: {INSTALL}")
        binaries = self._bin()
        _give_to(self.directory, self._user)
        # -N: no fsync of the new files (the cluster is thrown away; saves seconds).
        self._run(str(binaries / "initdb"), "-D", str(self._data), "-A", "trust",
                  "-U", "postgres", "-E", "UTF8", "--locale=C", "-N")

    def _configure(self) -> None:
        lines = [f"port = {self.port}", "listen_addresses = '127.0.0.1'",
                 f"unix_socket_directories = '{self.directory}'"]
        lines += [f"{key} = '{value}'" for key, value in self.settings.items()]
        with open(self._data / "postgresql.conf", "a") as conf:
            # Appended: a later line wins, so a new port replaces the one that was taken.
            conf.write("\n# dbscheduler's private server\n" + "\n".join(lines) + "\n")

    def start(self) -> None:
        if self.pid() is not None:
            return
        if self._configured_port() != self.port:
            self._configure()
        self._run(str(self._bin() / "pg_ctl"), "-D", str(self._data), "-w",
                  "-t", str(int(START_TIMEOUT)), "-l", str(self.directory / "server.log"),
                  "start", timeout=START_TIMEOUT + 10)

    def _configured_port(self) -> int | None:
        ports = re.findall(r"^port = (\d+)$", (self._data / "postgresql.conf").read_text(),
                           re.MULTILINE)
        return int(ports[-1]) if ports else None

    def stop(self) -> None:
        if self.pid() is None:
            return
        self._run(str(self._bin() / "pg_ctl"), "-D", str(self._data), "-w",
                  "-t", str(int(START_TIMEOUT)), "-m", "fast", "stop",
                  timeout=START_TIMEOUT + 10)

    def _port_was_taken(self) -> bool:
        return "could not bind" in _tail(self.directory / "server.log", 40)

    def _create_database(self) -> None:
        engine = sa.create_engine(self.admin_url, isolation_level="AUTOCOMMIT",
                                  poolclass=sa.pool.NullPool)
        try:
            with engine.connect() as conn:
                conn.exec_driver_sql(f'CREATE DATABASE "{self.database}"')
        finally:
            engine.dispose()
