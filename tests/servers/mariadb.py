"""A throwaway MariaDB server."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import sqlalchemy as sa

from tests.servers.base import (
    INSTALL,
    START_TIMEOUT,
    PrivateServer,
    Unavailable,
    _give_to,
    _pid_in,
    _read_from,
    _tail,
    _user_exists,
    _wait_gone,
    alive,
    answers,
)


class PrivateMariaDB(PrivateServer):
    """MariaDB from ``mariadb-install-db`` and ``mariadbd``, run as ``mysql`` when we are root
    (as root where there is no such user); user ``root`` without a password; the compiled-in
    settings with the character set Debian's packages configure (utf8mb4), except those passed
    in ``settings`` (``mariadbd`` option names without the dashes)."""

    kind = "mysql"
    label = "MariaDB"

    @property
    def url(self) -> str:
        return f"mysql+pymysql://root@127.0.0.1:{self.port}/{self.database}"

    @staticmethod
    def binaries() -> tuple[Path, Path] | None:
        """``(install_db, mariadbd)``, None when MariaDB is not installed."""
        install = shutil.which("mariadb-install-db") or shutil.which("mysql_install_db")
        server = shutil.which("mariadbd") or next(
            (p for p in ("/usr/sbin/mariadbd", "/usr/libexec/mariadbd", "/usr/sbin/mysqld")
             if Path(p).exists()), None)
        if install is None or server is None:
            return None
        return Path(install), Path(server)

    def _bin(self) -> tuple[Path, Path]:
        found = self.binaries()
        if found is None:
            raise Unavailable("MariaDB's server binaries (mariadb-install-db, mariadbd) are not "
                              f"installed; install them with: {INSTALL}")
        return found

    @property
    def _user(self) -> str | None:
        if os.geteuid() != 0:
            return None
        return "mysql" if _user_exists("mysql") else "root"

    def pid(self) -> int | None:
        pid = _pid_in(self.directory / "mysqld.pid")
        if pid is not None and alive(pid):
            return pid
        # No pid file yet: a Galera joiner writes it only once it has joined, so one that
        # never joined would outlive its kill, holding its ports (a retry then found its
        # Galera port in use). Found by its data directory on its command line instead.
        return _process_with_argument(f"--datadir={self.directory / 'data'}")

    def _initialise(self) -> None:
        install, _ = self._bin()
        _give_to(self.directory, self._user)
        cmd = [str(install), "--no-defaults", f"--datadir={self.directory / 'data'}",
               "--auth-root-authentication-method=normal", "--skip-test-db"]
        if self._user is not None:
            cmd.append(f"--user={self._user}")
        log = self.directory / "install.log"
        with open(log, "ab") as out:
            done = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                  timeout=START_TIMEOUT, check=False)
        if done.returncode != 0:
            raise Unavailable(f"{install.name} failed ({done.returncode}): {_tail(log)}")

    def _options(self) -> list[str]:
        d = self.directory
        options = {"datadir": str(d / "data"), "port": str(self.port),
                   "bind-address": "127.0.0.1", "socket": str(d / "mysqld.sock"),
                   "pid-file": str(d / "mysqld.pid"), "log-error": str(d / "error.log"),
                   "character-set-server": "utf8mb4", "collation-server": "utf8mb4_general_ci",
                   **self.settings}
        if self._user is not None:
            options["user"] = self._user
        return ["--no-defaults", *(f"--{k}={v}" for k, v in options.items())]

    def start(self) -> None:
        if self.pid() is not None:
            return
        _, server = self._bin()
        (self.directory / "mysqld.pid").unlink(missing_ok=True)
        errors = self.directory / "error.log"
        offset = errors.stat().st_size if errors.exists() else 0
        cmd = [str(server), *self._options()]
        # Detached (setsid -f): the server is nobody's child here, so whichever test process
        # stops it later sees it gone instead of a zombie only its starter could reap.
        launcher = ["setsid", "-f"] if shutil.which("setsid") else []
        with open(self.directory / "stdout.log", "ab") as out:
            subprocess.run([*launcher, *cmd], stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                           check=True, timeout=30, start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT
        while not answers(self.url.replace(f"/{self.database}", "/")):
            pid_seen = _pid_in(self.directory / "mysqld.pid")
            failed = "Aborting" in _read_from(errors, offset)
            if failed or time.monotonic() > deadline or (pid_seen and not alive(pid_seen)):
                self.kill()
                self._start_log = _read_from(errors, offset)
                raise Unavailable(f"mariadbd did not start on port {self.port}: "
                                  f"{' | '.join(self._start_log.strip().splitlines()[-8:])}")
            time.sleep(0.1)

    def stop(self) -> None:
        pid = self.pid()
        if pid is None:
            return
        os.kill(pid, signal.SIGTERM)  # a clean shutdown, as mysqladmin shutdown does
        if not _wait_gone(pid, START_TIMEOUT):
            self.kill()

    _start_log = ""

    def _port_was_taken(self) -> bool:
        return "Address already in use" in self._start_log

    def _create_database(self) -> None:
        engine = sa.create_engine(self.url.replace(f"/{self.database}", "/"),
                                  isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
        try:
            with engine.connect() as conn:
                conn.exec_driver_sql(f"CREATE DATABASE IF NOT EXISTS `{self.database}`")
        finally:
            engine.dispose()


def _process_with_argument(argument: str) -> int | None:
    """The process whose command line holds ``argument``, if any (Linux's /proc)."""
    wanted = argument.encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if wanted in (entry / "cmdline").read_bytes().split(b"\0"):
                return int(entry.name)
        except OSError:
            continue
    return None
