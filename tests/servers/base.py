"""What every private server shares: its life (create, restart, kill, remove) and the
process and file helpers it stands on."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import time
from pathlib import Path
from typing import Any, ClassVar

import sqlalchemy as sa

INSTALL = "apt-get install -y postgresql mariadb-server"
"""The command that installs both servers' binaries (Debian, Ubuntu)."""
ROOT = Path(__file__).resolve().parents[2]
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
        from tests.servers.mariadb import PrivateMariaDB
        from tests.servers.postgresql import PrivatePostgres

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


