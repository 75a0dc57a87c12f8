"""PostgreSQL sessions of an engine dbscheduler creates: each new connection learns what it
reached (the server itself or a pooler in front, a primary or a read-only server, the same
server as before or another) in one round trip, and is set up to match.

* **Bounds** (statement and idle-transaction timeouts, server-side keepalives) are set with
  ``set_config`` once per new connection, not as the libpq ``options`` startup parameter, which
  PgBouncer refuses. Settings the URL's own ``options`` names are left as the user set them.
* **Behind a pooler or proxy** (the server listens on another port than the one connected
  to), server-side prepared statements are turned off for the connection — a transaction
  pooler hands each transaction another server session, where a statement prepared on the
  first one does not exist — and the session settings are not sent: under transaction pooling
  a session setting would stay on a server session other clients then use. The pooler's own
  ``query_timeout`` and ``idle_transaction_timeout`` take their place (said once in the log).
* **A read-only server** (a standby, or ``default_transaction_read_only``) and **another
  server than before** (a failover or a restart) are each logged once.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine

from .sessions import idle_transaction_timeout, statement_timeout

__all__ = ["ServerWatch", "session_settings", "watch_of"]

log = logging.getLogger("dbscheduler.database")

_PROBE = (
    "SELECT inet_server_port(), host(inet_server_addr()), pg_postmaster_start_time(), "
    "pg_is_in_recovery(), current_setting('transaction_read_only')"
)


def session_settings(lease: timedelta) -> dict[str, str]:
    """The server settings every session of a dbscheduler engine gets, by name."""
    ms = int(statement_timeout(lease).total_seconds() * 1000)
    return {
        "statement_timeout": str(ms),
        "idle_in_transaction_session_timeout":
            str(int(idle_transaction_timeout(lease).total_seconds() * 1000)),
        "tcp_keepalives_idle": "5",
        "tcp_keepalives_interval": "2",
        "tcp_keepalives_count": "3",
        "tcp_user_timeout": str(ms),
        # The engine's statements are small and frequent: compiling one to machine code
        # costs far more than running it. The pick is shaped to stay cheap with JIT on (users
        # bring their own engines and servers); this only spares our own sessions the risk.
        "jit": "off",
    }


@dataclass(frozen=True)
class _Server:
    address: str | None
    port: int | None
    started: datetime | None

    def __str__(self) -> str:
        where = f"{self.address or 'local socket'}:{self.port}" if self.port else "local socket"
        return f"{where}, up since {self.started:%Y-%m-%d %H:%M:%S}" if self.started else where


class ServerWatch:
    """What the connections of one engine found; attached by :meth:`attach`.

    ``proxied`` is True once a connection found a pooler or proxy in front of the server,
    ``read_only`` whether the latest connection reached a server that refuses writes.
    """

    def __init__(self, settings: Mapping[str, str]) -> None:
        self.settings = dict(settings)
        self.proxied = False
        self.read_only = False
        self._server: _Server | None = None
        self._lock = threading.Lock()

    def attach(self, engine: Engine) -> None:
        _watches[engine] = self
        event.listen(engine, "connect", self._on_connect)

    def _on_connect(self, dbapi_conn: Any, record: Any) -> None:
        cursor = dbapi_conn.cursor()
        try:
            cursor.execute(_PROBE)
            port, address, started, recovery, read_only = cursor.fetchone()
            info = dbapi_conn.info
            socket = str(info.host or "").startswith("/")
            proxied = port is not None and not socket and int(info.port) != int(port)
            if proxied:
                dbapi_conn.prepare_threshold = None
            elif self.settings:
                cursor.execute(
                    "SELECT " + ", ".join("set_config(%s, %s, false)" for _ in self.settings),
                    [v for item in self.settings.items() for v in item],
                )
            dbapi_conn.commit()
        finally:
            cursor.close()
        self._learned(_Server(address, port, started), proxied, int(info.port),
                      bool(recovery) or read_only == "on", bool(recovery))

    def _learned(self, server: _Server, proxied: bool, client_port: int, read_only: bool,
                 standby: bool) -> None:
        with self._lock:
            first_proxy = proxied and not self.proxied
            self.proxied = self.proxied or proxied
            turned_read_only = read_only and not self.read_only
            recovered = self.read_only and not read_only
            self.read_only = read_only
            before, self._server = self._server, server
        if first_proxy:
            log.info(
                "connected through a pooler or proxy (port %d; the server listens on %s): "
                "server-side prepared statements are off, and the session bounds are left to "
                "the pooler (set its query_timeout and idle_transaction_timeout; see Running "
                "on a production database in the docs)", client_port, server.port,
            )
        if before is not None and before != server:
            log.warning("the database server changed: now %s, was %s (a failover or a "
                        "restart)", server, before)
        if turned_read_only:
            kind = "a standby in recovery" if standby else "transaction_read_only is on"
            log.warning(
                "the database server %s is read-only (%s): this node can neither take nor "
                "finish tasks there; with several hosts in the URL add "
                "target_session_attrs=read-write", server, kind,
            )
        elif recovered:
            log.info("the database server %s accepts writes again", server)


_watches: weakref.WeakKeyDictionary[Engine, ServerWatch] = weakref.WeakKeyDictionary()


def watch_of(engine: Engine) -> ServerWatch | None:
    """The :class:`ServerWatch` of an engine dbscheduler created, else ``None``."""
    return _watches.get(engine)
