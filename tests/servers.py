"""Throwaway PostgreSQL and MariaDB servers, for the tests and the benchmark.

Each server is built from the installed server binaries in a directory of its own, listens on
a free port of 127.0.0.1 (its unix socket in that directory), and is removed afterwards — also
when the process that wanted it dies without cleaning up: :func:`start_watchdog` starts a
small detached process that kills the servers and removes the directory once its owner has
gone (a crash, ``kill -9``, Ctrl-C). So the machine's own servers are never stopped, restarted
or written to, and several runs on one machine each have their own.

>>> server = throwaway(PrivatePostgres, {"fsync": "off"})  # doctest: +SKIP
>>> server.url  # doctest: +SKIP
'postgresql+psycopg://postgres@127.0.0.1:40123/test'
>>> server.remove()  # doctest: +SKIP

``python -m tests.servers watch OWNER_PID OWNER_START DIRECTORY`` is the watchdog itself.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, ClassVar

import sqlalchemy as sa

INSTALL = "apt-get install -y postgresql mariadb-server"
"""The command that installs both servers' binaries (Debian, Ubuntu)."""
ROOT = Path(__file__).resolve().parents[1]
START_TIMEOUT = 120.0
"""Seconds a server may take to accept connections: generous, for a loaded machine."""


class Unavailable(Exception):
    """The server cannot be started here: the reason says why and what to install."""


def _as_user(user: str | None, cmd: list[str]) -> list[str]:
    """``cmd`` run as ``user`` when we are root (servers refuse to run as root)."""
    if user is None or os.geteuid() != 0:
        return cmd
    return ["runuser", "-u", user, "--", *cmd]


def _give_to(path: Path, user: str | None) -> None:
    if user is not None and os.geteuid() == 0:
        entry = pwd.getpwnam(user)
        os.chown(path, entry.pw_uid, entry.pw_gid)


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def process_start(pid: int) -> str | None:
    """When ``pid`` started (kernel ticks since boot), None when no such process lives: with
    the pid it names one process, even after the pid is reused. A zombie counts as gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return None if fields[0] in ("Z", "X") else fields[19]


def alive(pid: int) -> bool:
    return process_start(pid) is not None


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _pid_in(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def answers(url: str) -> bool:
    """The server behind ``url`` accepts a connection and answers a query."""
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool,
                              connect_args={"connect_timeout": 2})
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
        return True
    except Exception:
        return False
    finally:
        engine.dispose()


def _tail(path: Path, lines: int = 8) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _read_from(path: Path, offset: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")
    except OSError:
        return ""


class PrivateServer:
    """One throwaway server in ``directory``; :meth:`create` builds and starts it."""

    kind: ClassVar[str]
    label: ClassVar[str]
    database = "test"

    def __init__(self, directory: Path, settings: dict[str, str] | None = None,
                 port: int = 0) -> None:
        self.directory = directory
        self.settings = dict(settings or {})
        self.port = port
        self.owned_root: Path | None = None
        """A directory :meth:`remove` deletes too (the temporary one :func:`throwaway` made)."""

    # -- what the tests read ----------------------------------------------------------------
    @property
    def url(self) -> str:
        """The URL of its ``test`` database."""
        raise NotImplementedError

    def state(self) -> dict[str, Any]:
        return {"kind": self.kind, "directory": str(self.directory),
                "settings": self.settings, "port": self.port, "url": self.url}

    @staticmethod
    def from_state(state: dict[str, Any]) -> PrivateServer:
        cls = {c.kind: c for c in (PrivatePostgres, PrivateMariaDB)}[state["kind"]]
        return cls(Path(state["directory"]), state["settings"], int(state["port"]))

    def __repr__(self) -> str:
        return f"<private {self.label} on 127.0.0.1:{self.port} in {self.directory}>"

    # -- life ------------------------------------------------------------------------------
    def create(self) -> None:
        """Build the data directory, start the server on a free port (another if that one is
        taken meanwhile) and create the ``test`` database."""
        # What a process that died while creating it left there is of no use.
        self.kill()
        shutil.rmtree(self.directory, ignore_errors=True)
        self.directory.mkdir(parents=True)
        self._initialise()
        for attempt in range(3):
            self.port = free_port()
            try:
                self.start()
                break
            except Unavailable:
                if attempt == 2 or not self._port_was_taken():
                    raise
        self._create_database()

    def restart(self, hold: float = 0.0) -> float:
        """Stop (fast shutdown), wait ``hold`` seconds, start; the seconds it was down.
        Whatever happens, the server is started again before this returns."""
        began = time.monotonic()
        try:
            self.stop()
            time.sleep(hold)
        finally:
            self.ensure_running()
        return time.monotonic() - began

    def ensure_running(self) -> None:
        if self.pid() is None or not answers(self.url):
            self.start()

    def remove(self) -> None:
        """Kill the server and delete its directory."""
        self.kill()
        shutil.rmtree(self.owned_root or self.directory, ignore_errors=True)

    def kill(self) -> None:
        """End the server at once (its data is thrown away, so no clean shutdown)."""
        pid = self.pid()
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, self.crash_signal)
        if not _wait_gone(pid, 10):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            _wait_gone(pid, 10)

    crash_signal: ClassVar[int] = signal.SIGKILL

    # -- per server --------------------------------------------------------------------------
    @staticmethod
    def binaries() -> object | None:
        """What the server is built from; None when it is not installed."""
        raise NotImplementedError

    def pid(self) -> int | None:
        raise NotImplementedError

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def _initialise(self) -> None:
        raise NotImplementedError

    def _port_was_taken(self) -> bool:
        raise NotImplementedError

    def _create_database(self) -> None:
        raise NotImplementedError


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
        return pid if pid is not None and alive(pid) else None

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


# -- the watchdog -----------------------------------------------------------------------------
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
    """End every server whose pid file lies under ``directory``, at once."""
    for kind, pidfile in (("postgresql", "data/postmaster.pid"), ("mysql", "mysqld.pid")):
        for path in directory.glob(f"*/{pidfile}"):
            server_dir = path.parent.parent if kind == "postgresql" else path.parent
            cls: type[PrivateServer] = PrivatePostgres if kind == "postgresql" else PrivateMariaDB
            cls(server_dir).kill()


def _watch(owner: int, started: str, directory: Path) -> None:
    while directory.exists():
        if process_start(owner) != started:
            kill_all_in(directory)
            shutil.rmtree(directory, ignore_errors=True)
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


def main(argv: list[str]) -> int:
    if len(argv) == 4 and argv[0] == "watch":
        _watch(int(argv[1]), argv[2], Path(argv[3]))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
