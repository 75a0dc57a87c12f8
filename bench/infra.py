"""Node processes, databases and the peers' virtual environments.

Every child runs in its own process group and is tracked here; :func:`kill_all` (called on
exit, on SIGINT/SIGTERM and on any exception) ends every one that is left. Databases and files
the benchmark creates are dropped by :meth:`Databases.drop_all`.
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
PEERS = BENCH / ".peers"
MAIN_PYTHON = Path(sys.executable)

SHARED_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
MARIADB_ADMIN_URL = "mysql+pymysql://root@127.0.0.1:3306/test"
PREFIX = "dbsbench_"
SETTLE_DIRTY_PAGES = 100
"""MariaDB counts as settled with fewer dirty InnoDB pages than this."""
SETTLE_MAX_SECONDS = 30.0

_children: set[Node] = set()
_lock = threading.Lock()


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- peers' virtual environments ------------------------------------------------------------
@dataclass(frozen=True)
class PeerEnv:
    name: str
    requirements: tuple[str, ...]

    @property
    def path(self) -> Path:
        return PEERS / self.name

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"


PEER_ENVS = {
    "aps3": PeerEnv("aps3", ("apscheduler==3.11.*", "sqlalchemy>=2", "psycopg[binary]>=3.1")),
    "aps4": PeerEnv("aps4", ("apscheduler==4.0.0a6", "sqlalchemy[asyncio]>=2",
                             "psycopg[binary]>=3.1", "sniffio")),
    "procrastinate": PeerEnv("procrastinate", ("procrastinate==3.10.*",
                                               "psycopg[binary,pool]>=3.1")),
    "tools": PeerEnv("tools", ("py-spy", "pyinstrument")),
}


def ensure_env(env: PeerEnv) -> Path:
    """Create ``bench/.peers/<name>`` with the pinned requirements unless it is there already."""
    marker = env.path / ".bench-requirements"
    wanted = "\n".join(env.requirements)
    if env.python.exists() and marker.exists() and marker.read_text() == wanted:
        return env.python
    log(f"installing {env.name} into {env.path} ({', '.join(env.requirements)}) …")
    PEERS.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(env.path)], check=True)
    subprocess.run(
        [str(env.python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         *env.requirements],
        check=True, timeout=900,
    )
    marker.write_text(wanted)
    return env.python


# -- node processes -------------------------------------------------------------------------
class NodeError(RuntimeError):
    pass


class Node:
    """One node process speaking :mod:`bench.protocol`."""

    def __init__(self, python: Path, module: str, config: dict[str, Any], log_dir: Path,
                 name: str) -> None:
        self.name = name
        self.config = config
        self.stderr_path = log_dir / f"{name}.stderr"
        env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
        with open(self.stderr_path, "ab") as err:
            self.proc = subprocess.Popen(
                [str(python), "-m", module, json.dumps(config)],
                cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                text=True, start_new_session=True,
            )
        with _lock:
            _children.add(self)
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.ready: dict[str, Any] = {}

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def _expect(self, timeout: float) -> tuple[str, Any]:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise NodeError(f"{self.name}: no answer within {timeout} s "
                            f"(see {self.stderr_path})") from None
        if line is None:
            raise NodeError(f"{self.name}: exited with {self.proc.wait()} "
                            f"(see {self.stderr_path}): {self.tail()}")
        kind, _, payload = line.partition(" ")
        if kind not in ("ok", "ready", "err"):
            return self._expect(timeout)  # stray output of a library: skip it
        if kind == "err":
            raise NodeError(f"{self.name}: {payload}")
        return kind, json.loads(payload) if payload else {}

    def wait_ready(self, timeout: float) -> dict[str, Any]:
        kind, payload = self._expect(timeout)
        if kind != "ready":
            raise NodeError(f"{self.name}: expected ready, got {kind}")
        ready: dict[str, Any] = payload
        self.ready = ready
        return ready

    def call(self, command: str, args: dict[str, Any] | None = None,
             timeout: float = 60) -> dict[str, Any]:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(f"{command} {json.dumps(args or {})}\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise NodeError(f"{self.name}: gone ({self.tail()})") from None
        _, payload = self._expect(timeout)
        result: dict[str, Any] = payload
        return result

    def dump(self, directory: Path) -> list[tuple[int, float, float]]:
        path = directory / f"{self.name}-{time.monotonic_ns()}.json"
        self.call("dump", {"path": str(path)})
        items = [(int(i), float(due), float(start))
                 for i, due, start in json.loads(path.read_text())]
        path.unlink()
        return items

    def tail(self, n: int = 5) -> str:
        try:
            lines = self.stderr_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return " | ".join(lines[-n:])

    def stop(self, timeout: float = 20) -> None:
        """Graceful stop; SIGKILL of the whole group if it does not end in time."""
        if self.proc.poll() is None:
            with suppress(NodeError, OSError):
                self.call("stop", timeout=timeout)
            with suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)
        self.kill()

    def kill(self) -> None:
        if self.proc.poll() is None:
            with suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        with _lock:
            _children.discard(self)

    def kill9(self) -> float:
        """``kill -9`` of the node (its whole process group); returns the time it was sent."""
        sent = time.time()
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        with _lock:
            _children.discard(self)
        return sent


def kill_all() -> None:
    with _lock:
        children = list(_children)
    for child in children:
        child.kill()


atexit.register(kill_all)


def install_signal_handlers() -> None:
    def handle(signum: int, frame: Any) -> None:
        kill_all()
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, handle)


@contextmanager
def nodes_cleanup() -> Iterator[list[Node]]:
    """Nodes appended to the yielded list are stopped (or killed) on the way out."""
    started: list[Node] = []
    try:
        yield started
    finally:
        threads = [threading.Thread(target=n.stop) for n in started]
        for t in threads:
            t.start()
        for t in threads:
            t.join(40)
        for n in started:
            n.kill()


# -- databases ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Backend:
    """Where one system under test keeps its data for one run."""

    kind: str  # postgresql | sqlite | mysql
    url: str  # SQLAlchemy URL (sync, psycopg / pymysql / sqlite)

    @property
    def dsn(self) -> str:
        """libpq form of a PostgreSQL URL (Procrastinate)."""
        return self.url.replace("postgresql+psycopg://", "postgresql://")

    def analyze(self) -> None:
        """PostgreSQL: ``ANALYZE`` every table of the system's database, as autovacuum does
        on a production server within a minute of a bulk insert (a benchmark's set-up is
        measured sooner than that). Without statistics, plans are guesses that differ
        from system to system; the others keep their statistics by themselves."""
        if self.kind != "postgresql":
            return
        engine = sa.create_engine(self.url, isolation_level="AUTOCOMMIT",
                                  poolclass=sa.NullPool)
        try:
            with engine.connect() as conn:
                conn.exec_driver_sql("ANALYZE")
        finally:
            engine.dispose()


class Databases:
    """The benchmark's own databases: ``dbsbench_<system>`` on PostgreSQL, ``dbsbench`` on
    MariaDB, SQLite files in a temporary directory. All dropped at the end."""

    def __init__(self, pg_admin_url: str, mariadb_admin_url: str = MARIADB_ADMIN_URL) -> None:
        self.pg_admin_url = pg_admin_url
        self.mariadb_admin_url = mariadb_admin_url
        self._pg = sa.create_engine(pg_admin_url, isolation_level="AUTOCOMMIT",
                                    poolclass=sa.NullPool)
        self._my: sa.Engine | None = None
        self._pg_dbs: set[str] = set()
        self._tmp = Path(tempfile.mkdtemp(prefix="dbsbench-"))
        self.mariadb_available = False

    def postgresql(self, system: str) -> Backend:
        """A fresh, empty database for ``system`` (dropped and created again)."""
        name = PREFIX + system
        with self._pg.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        self._pg_dbs.add(name)
        url = self._pg.url.set(database=name).render_as_string(hide_password=False)
        return Backend("postgresql", url)

    def server_statements(self, backend: Backend) -> int | None:
        """Statements the server ran in ``backend``'s database (``pg_stat_statements``: every
        statement, ``BEGIN``/``COMMIT`` and pre-pings included), None where unavailable."""
        try:
            with self._pg.connect() as conn:
                value = conn.exec_driver_sql(
                    "SELECT coalesce(sum(s.calls), 0) FROM pg_stat_statements s "
                    "JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = %s",
                    (sa.engine.make_url(backend.url).database,),
                ).scalar()
        except sa.exc.DBAPIError:
            return None
        return int(value or 0)

    def reset_postgresql(self, backend: Backend) -> None:
        """Empty a database quickly (every table gone) without dropping it."""
        engine = sa.create_engine(backend.url, isolation_level="AUTOCOMMIT",
                                  poolclass=sa.NullPool)
        with engine.connect() as conn:
            conn.exec_driver_sql("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
        engine.dispose()

    def mariadb(self) -> Backend | None:
        try:
            if self._my is None:
                self._my = sa.create_engine(self.mariadb_admin_url, isolation_level="AUTOCOMMIT",
                                            poolclass=sa.NullPool)
            with self._my.connect() as conn:
                conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {PREFIX}dbs")
                conn.exec_driver_sql(f"CREATE DATABASE {PREFIX}dbs")
        except Exception as exc:
            log(f"MariaDB unavailable, skipped: {exc}")
            return None
        self.mariadb_available = True
        url = sa.engine.make_url(self.mariadb_admin_url).set(database=f"{PREFIX}dbs")
        return Backend("mysql", url.render_as_string(hide_password=False))

    def sqlite(self, run: str) -> Backend:
        self._tmp.mkdir(parents=True, exist_ok=True)
        path = self._tmp / f"{run}.sqlite3"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        return Backend("sqlite", f"sqlite:///{path}")

    def server_versions(self) -> dict[str, str]:
        out: dict[str, str] = {}
        with self._pg.connect() as conn:
            out["postgresql"] = str(conn.exec_driver_sql("SHOW server_version").scalar())
            out["postgresql.url"] = self._pg.url.render_as_string(hide_password=True)
            for setting in ("synchronous_commit", "fsync", "autovacuum", "shared_buffers"):
                out[f"postgresql.{setting}"] = str(
                    conn.exec_driver_sql(f"SHOW {setting}").scalar())
        try:
            engine = sa.create_engine(self.mariadb_admin_url, poolclass=sa.NullPool)
            with engine.connect() as conn:
                out["mariadb"] = str(conn.exec_driver_sql("SELECT VERSION()").scalar())
        except Exception:
            out["mariadb"] = "unavailable"
        return out

    def settle(self) -> dict[str, float]:
        """Write out what the earlier workloads left in the servers' memory, so that no
        workload pays for the writes of the one before it (in one full run, a checkpoint of
        the earlier workloads' writes ran through a whole burst workload): a ``CHECKPOINT``
        on PostgreSQL; on MariaDB, ``innodb_max_dirty_pages_pct`` 0 until InnoDB has flushed
        its dirty pages (idle, it keeps thousands for the next workload to write), at most
        :data:`SETTLE_MAX_SECONDS`, then the setting as it was. Returns the seconds each
        took. Every system gets it before every workload."""
        took: dict[str, float] = {}
        began = time.time()
        try:
            with self._pg.connect() as conn:
                conn.exec_driver_sql("CHECKPOINT")
            took["postgresql"] = time.time() - began
        except sa.exc.DBAPIError as exc:
            log(f"no CHECKPOINT before the workload: {exc}")
        if self._my is None:
            self._my = sa.create_engine(self.mariadb_admin_url, isolation_level="AUTOCOMMIT",
                                        poolclass=sa.NullPool)
        began = time.time()
        with suppress(sa.exc.DBAPIError):  # no MariaDB here: nothing to wait for
            with self._my.connect() as conn:
                was = conn.exec_driver_sql("SELECT @@GLOBAL.innodb_max_dirty_pages_pct").scalar()
                conn.exec_driver_sql("SET GLOBAL innodb_max_dirty_pages_pct = 0")
                try:
                    while time.time() - began < SETTLE_MAX_SECONDS:
                        dirty = conn.exec_driver_sql(
                            "SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_pages_dirty'").one()[1]
                        if int(dirty) < SETTLE_DIRTY_PAGES:
                            break
                        time.sleep(0.2)
                finally:
                    conn.exec_driver_sql(f"SET GLOBAL innodb_max_dirty_pages_pct = {float(was)}")
            took["mariadb"] = time.time() - began
        return took

    def drop_all(self) -> None:
        """Drop everything the run created (retried: other test suites may restart servers)."""
        for attempt in range(5):
            try:
                self._drop_all()
                return
            except sa.exc.OperationalError as exc:
                log(f"cleanup failed ({exc.orig!r}); retrying")
                time.sleep(2 + attempt * 2)
        self._drop_all()

    def _drop_all(self) -> None:
        with self._pg.connect() as conn:
            for name in sorted(self._pg_dbs):
                conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self._pg_dbs.clear()
        if self.mariadb_available and self._my is not None:
            with self._my.connect() as conn:
                conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {PREFIX}dbs")
        shutil.rmtree(self._tmp, ignore_errors=True)
