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

"""

from tests.servers.base import (
    INSTALL,
    ROOT,
    START_TIMEOUT,
    PrivateServer,
    Unavailable,
    alive,
    answers,
    free_port,
    process_start,
)
from tests.servers.mariadb import PrivateMariaDB
from tests.servers.postgresql import PrivatePostgres
from tests.servers.watchdog import kill_all_in, start_watchdog, throwaway

__all__ = [
    "INSTALL", "ROOT", "START_TIMEOUT", "PrivateMariaDB", "PrivatePostgres", "PrivateServer",
    "Unavailable", "alive", "answers", "free_port", "kill_all_in", "process_start",
    "start_watchdog", "throwaway",
]
