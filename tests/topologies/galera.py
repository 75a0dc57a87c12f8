"""A private three-node MariaDB Galera cluster from Debian's ``galera-4`` and the installed
MariaDB: each node a :class:`~tests.servers.PrivateMariaDB` with its own ports for the cluster
(gcomm), incremental (IST) and full (SST, rsync) state transfer; the first bootstraps the
cluster, the others join it. All in one temporary directory watched for this process's death.

A node may run with its wall clock shifted (``clock_offsets``): ``libfaketime`` preloaded into
its ``mariadbd`` moves every time the server reads (``UTC_TIMESTAMP``, ``NOW``), as a host
whose clock is off would, and leaves its monotonic clock (Galera's timeouts) alone."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.databases import servers_base
from tests.servers import PrivateMariaDB, Unavailable, alive, free_port, start_watchdog

PROVIDER = Path("/usr/lib/galera/libgalera_smm.so")
INSTALL = "apt-get install -y galera-4 rsync"
FAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1")
FAKETIME_INSTALL = "apt-get install -y libfaketime"


class GaleraNode(PrivateMariaDB):
    """One Galera node; ``bootstrap`` starts a new cluster instead of joining one."""

    def __init__(self, directory: Path, name: str, gcomm: list[int], index: int,
                 clock_offset: float = 0.0) -> None:
        self.gcomm_ports = gcomm
        self.index = index
        self.bootstrap = index == 0
        self.clock_offset = clock_offset
        me = gcomm[index]
        ist, sst = free_port(), free_port()
        super().__init__(directory, {
            "wsrep_on": "ON",
            "wsrep_provider": str(PROVIDER),
            "wsrep_cluster_name": "dbscheduler",
            "wsrep_node_name": name,
            "wsrep_cluster_address": "gcomm://" + ",".join(f"127.0.0.1:{p}" for p in gcomm),
            "wsrep_provider_options": (f"gmcast.listen_addr=tcp://127.0.0.1:{me};"
                                       f"ist.recv_addr=127.0.0.1:{ist};base_port={me}"),
            "wsrep_node_address": f"127.0.0.1:{me}",
            "wsrep_sst_receive_address": f"127.0.0.1:{sst}",
            "wsrep_sst_method": "rsync",
            "binlog_format": "ROW",
            "innodb_autoinc_lock_mode": "2",
            "default_storage_engine": "InnoDB",
        })

    def _options(self) -> list[str]:
        options = super()._options()
        # Only the first start of the first node makes a new cluster.
        return [*options, "--wsrep-new-cluster"] if self.bootstrap else options

    def start(self) -> None:
        if not self.clock_offset:
            super().start()
            return
        # The server is started with this process's environment: shift it for that start.
        shifted = {"LD_PRELOAD": str(FAKETIME), "FAKETIME": f"{self.clock_offset:+g}",
                   "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
        saved = {k: os.environ.get(k) for k in shifted}
        os.environ.update(shifted)
        try:
            super().start()
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value

    def _create_database(self) -> None:
        if self.bootstrap:
            super()._create_database()

    def cluster_size(self) -> int:
        engine = sa.create_engine(self.url.replace(f"/{self.database}", "/"),
                                  poolclass=sa.pool.NullPool)
        try:
            with engine.connect() as conn:
                row = conn.exec_driver_sql("SHOW STATUS LIKE 'wsrep_cluster_size'").first()
                return int(row[1]) if row else 0
        finally:
            engine.dispose()


@contextmanager
def galera_cluster(size: int = 3, clock_offsets: Mapping[int, float] | None = None
                   ) -> Iterator[list[GaleraNode]]:
    """``size`` Galera nodes in one cluster, each answering with the ``test`` database;
    ``clock_offsets``: seconds by which a node's clock (by index) is shifted."""
    if not PROVIDER.exists() or PrivateMariaDB.binaries() is None:
        pytest.skip(f"MariaDB Galera is not installed ({INSTALL})")
    offsets = dict(clock_offsets or {})
    if offsets and not FAKETIME.exists():
        pytest.skip(f"libfaketime is not installed ({FAKETIME_INSTALL})")
    import shutil
    import tempfile

    # Where the suite's own servers live (in memory when it has room): a joiner's state
    # transfer and every node's syncs are then quick.
    root = Path(tempfile.mkdtemp(prefix="dbscheduler-galera-", dir=servers_base()))
    root.chmod(0o755)
    start_watchdog(root, os.getpid())
    gcomm = [free_port() for _ in range(size)]
    nodes = [GaleraNode(root / f"g{i}", f"g{i}", gcomm, i, offsets.get(i, 0.0))
             for i in range(size)]
    shared_before = set(FAKETIME_SHARED.glob("faketime_shm_*"))
    try:
        for node in nodes:
            # One more try from a new data directory: under load a joiner's first start was
            # seen to fail once in a full run (its state transfer under a busy machine).
            first: Unavailable | None = None
            for _ in range(2):
                try:
                    node.create()
                    break
                except Unavailable as exc:
                    if first is not None:
                        pytest.fail(f"Galera node {node.directory.name} did not start twice: "
                                    f"{first}; then {exc}")
                    first = exc
            node.bootstrap = False
        deadline = time.monotonic() + 60
        while nodes[0].cluster_size() < size:
            if time.monotonic() > deadline:
                pytest.fail(f"the Galera cluster did not reach {size} nodes")
            time.sleep(0.2)
        yield nodes
    finally:
        for node in nodes:
            node.kill()
        shutil.rmtree(root, ignore_errors=True)
        if offsets:
            _remove_faketime_leftovers(set(FAKETIME_SHARED.glob("faketime_shm_*")) - shared_before)


FAKETIME_SHARED = Path("/dev/shm")
"""Where libfaketime keeps a shared memory segment and a semaphore for each process it runs in,
removed only when that process exits normally (a killed server leaves both)."""


def _remove_faketime_leftovers(segments: set[Path]) -> None:
    """Remove the segments (and their semaphores) that appeared during a cluster's life and
    whose process is gone: the servers this module shifted, killed at its end."""
    for segment in segments:
        pid = segment.name.rsplit("_", 1)[-1]
        if pid.isdigit() and not alive(int(pid)):
            segment.unlink(missing_ok=True)
            (FAKETIME_SHARED / f"sem.faketime_sem_{pid}").unlink(missing_ok=True)
