"""Faults the database side injects: cutting every scheduler connection, restarting the server,
and a TCP proxy that can cut, refuse or black-hole the traffic of the nodes behind it.

Only the run's private servers are restarted (see tests/servers/), never one given by URL.
Restarts always end with the server answering again (``finally``): the run's other tests use
the same servers.
"""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import sqlalchemy as sa
from sqlalchemy.engine import URL, make_url

from tests.servers import PrivateServer, answers


def wait_until_answers(url: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if answers(url):
            return True
        time.sleep(0.1)
    return False


@dataclass
class Server:
    """The database server behind ``admin_url`` (a URL with rights to kill connections)."""

    backend: str
    admin_url: str
    private: PrivateServer | None = None
    """The run's private server behind ``admin_url``; None for a server given by URL."""
    tag: str = field(default_factory=lambda: f"chaos_{uuid.uuid4().hex[:10]}")
    _user_created: bool = False

    # -- the nodes' URL: their connections carry a tag the server can find them by -------------
    def node_url(self) -> str:
        """A URL for the nodes whose connections :meth:`cut` can find: the application name
        on PostgreSQL, a user of their own on MariaDB (whose process list shows no names)."""
        url = make_url(self.admin_url)
        if self.backend == "postgresql":
            return url.update_query_dict({"application_name": self.tag}).render_as_string(
                hide_password=False)
        if self.backend == "mysql":
            self._create_user(url)
            return url.set(username=self.tag, password=None).render_as_string(
                hide_password=False)
        raise ValueError(f"no connection cuts on {self.backend}")

    def _create_user(self, url: URL) -> None:
        if self._user_created:
            return
        engine = sa.create_engine(self.admin_url, poolclass=sa.pool.NullPool)
        try:
            with engine.begin() as conn:
                conn.execute(sa.text(f"CREATE USER '{self.tag}'@'%'"))
                conn.execute(sa.text(f"GRANT ALL PRIVILEGES ON `{url.database}`.* TO "
                                     f"'{self.tag}'@'%'"))
            self._user_created = True
        finally:
            engine.dispose()

    def cleanup(self) -> None:
        if not self._user_created:
            return
        engine = sa.create_engine(self.admin_url, poolclass=sa.pool.NullPool)
        try:
            with engine.begin() as conn:
                conn.execute(sa.text(f"DROP USER IF EXISTS '{self.tag}'@'%'"))
            self._user_created = False
        except Exception:
            pass
        finally:
            engine.dispose()

    # -- cut every connection of the nodes -----------------------------------------------------
    def cut(self) -> int:
        """Terminate every connection the nodes hold (``pg_terminate_backend`` / ``KILL``);
        returns how many were cut."""
        engine = sa.create_engine(self.admin_url, poolclass=sa.pool.NullPool)
        try:
            with engine.connect() as conn:
                if self.backend == "postgresql":
                    return int(conn.execute(sa.text(
                        "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) "
                        "FROM pg_stat_activity WHERE application_name = :tag "
                        "AND pid <> pg_backend_pid()"), {"tag": self.tag}).scalar_one())
                ids = conn.execute(sa.text(
                    "SELECT ID FROM information_schema.PROCESSLIST WHERE USER = :tag"),
                    {"tag": self.tag}).scalars().all()
                cut = 0
                for id_ in ids:
                    try:
                        conn.execute(sa.text(f"KILL CONNECTION {int(id_)}"))
                        cut += 1
                    except sa.exc.DBAPIError:
                        pass  # it ended on its own meanwhile
                return cut
        finally:
            engine.dispose()

    # -- restart ---------------------------------------------------------------------------
    def restart_unavailable(self) -> str | None:
        """Why this server cannot be restarted from here, or None when it can: only a private
        server this run started is ever restarted."""
        if self.private is None:
            return (f"the {self.backend} server was given to the suite (by "
                    f"DBSCHEDULER_TEST_{self.backend.upper()}_URL or testcontainers), and the "
                    "suite restarts only the private servers it starts itself")
        return None

    def restart(self, hold: float = 0.0) -> float:
        """Stop the server, wait ``hold`` seconds, start it; returns the seconds it was down.

        Whatever happens, the server is started again before this returns.
        """
        assert self.private is not None, self.restart_unavailable()
        return self.private.restart(hold)

    def ensure_running(self, timeout: float = 90) -> None:
        if self.private is not None:
            self.private.ensure_running()
        if not wait_until_answers(self.admin_url, timeout):
            raise RuntimeError(f"the {self.backend} server did not come back in {timeout} s")


# -- a TCP proxy ------------------------------------------------------------------------------
class TcpProxy:
    """Listens on 127.0.0.1 and forwards to ``target``; nodes connect through it.

    Modes: ``forward``; ``refuse`` (every connection is cut and new ones are closed at once,
    like a server that is down); ``blackhole`` (nothing moves either way and new connections
    hang, like a network partition: the bytes wait and flow again when it heals).
    """

    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self._server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(128)
        self._server.settimeout(0.1)
        self.port: int = self._server.getsockname()[1]
        self._mode = "forward"
        self._lock = threading.Lock()
        self._socks: set[socket.socket] = set()
        self._closed = threading.Event()
        self._threads: list[threading.Thread] = []
        self._spawn(self._accept_loop)

    @classmethod
    def to(cls, url: str) -> TcpProxy:
        u = make_url(url)
        return cls(u.host or "127.0.0.1", int(u.port or {"postgresql": 5432}.get(
            u.get_backend_name(), 3306)))

    def url_through(self, url: str) -> str:
        return make_url(url).set(host="127.0.0.1", port=self.port).render_as_string(
            hide_password=False)

    @property
    def mode(self) -> str:
        return self._mode

    def set_mode(self, mode: str) -> None:
        assert mode in ("forward", "refuse", "blackhole")
        self._mode = mode
        if mode == "refuse":
            self.cut()

    def cut(self) -> None:
        """Reset every proxied connection."""
        with self._lock:
            socks = list(self._socks)
            self._socks.clear()
        for s in socks:
            _reset(s)

    def close(self) -> None:
        self._closed.set()
        self.cut()
        with contextlib.suppress(OSError):
            self._server.close()
        for t in self._threads:
            t.join(timeout=2)

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _spawn(self, target: object, *args: object) -> None:
        t = threading.Thread(target=target, args=args, daemon=True)  # type: ignore[arg-type]
        t.start()
        self._threads = [x for x in self._threads if x.is_alive()] + [t]

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if self._mode == "refuse":
                _reset(client)
                continue
            self._spawn(self._serve, client)

    def _serve(self, client: socket.socket) -> None:
        with self._lock:
            # Accepted while forwarding, but this thread began after the switch to refuse:
            # its cut() did not see this connection, so refuse it here (a loaded machine
            # once let a heartbeat's new connection through a refusing proxy this way).
            refused = self._mode == "refuse"
            if not refused:
                self._socks.add(client)
        if refused:
            _reset(client)
            return
        # A partitioned network lets no new connection through either: wait for it to heal.
        while self._mode == "blackhole" and not self._closed.is_set():
            time.sleep(0.05)
        try:
            upstream = socket.create_connection(self._target, timeout=5)
        except OSError:
            self._drop(client)
            return
        upstream.settimeout(None)
        with self._lock:
            self._socks.add(upstream)
        self._spawn(self._pump, client, upstream)
        self._pump(upstream, client)

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while not self._closed.is_set():
                if self._mode == "blackhole":
                    time.sleep(0.05)
                    continue
                ready, _, _ = select.select([src], [], [], 0.1)
                if not ready:
                    continue
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except (OSError, ValueError):
            pass
        self._drop(src)
        self._drop(dst)

    def _drop(self, s: socket.socket) -> None:
        with self._lock:
            self._socks.discard(s)
        with contextlib.suppress(OSError):
            s.close()


def _reset(s: socket.socket) -> None:
    with contextlib.suppress(OSError):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        s.close()


@contextlib.contextmanager
def proxy_for(url: str) -> Iterator[TcpProxy]:
    proxy = TcpProxy.to(url)
    try:
        yield proxy
    finally:
        proxy.close()
