"""Three scheduler nodes on a private three-node MariaDB Galera cluster, each writing through a
Galera node of its own, one Galera host's clock 2.5 s fast (``libfaketime`` in its
``mariadbd``): the engine takes "now" from the database, so the node on the fast server sees
the leases the others write expire 2.5 s early. It must notice (one warning), and never take
over a lease that is still alive: no task runs twice at once, and every task runs on.

Lease 3 s, renewed every second: a live lease written on a correct clock looks expired to the
fast server from half a second after each renewal, and one task works 4 s, so without the
skew detection the fast node takes it over from a healthy one within a few of its runs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import sqlalchemy as sa

from dbscheduler.migrate import upgrade
from tests.chaos.cluster import chaos_run, node_args
from tests.databases import unique_table
from tests.topologies.galera import GaleraNode, galera_cluster

pytestmark = pytest.mark.topologies

LEASE, RATE, POLL, SKEW = 3.0, 0.4, 0.25, 2.5
TASKS = 7
RUN_FOR = 15.0
WARNING = "database clock skew: the database server this node writes through"


def clock_of(node: GaleraNode) -> float:
    """The server's ``UTC_TIMESTAMP(6)`` (the engine's "now" on MariaDB) as a POSIX time."""
    engine = sa.create_engine(node.url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            value = conn.exec_driver_sql("SELECT UNIX_TIMESTAMP(UTC_TIMESTAMP(6))").scalar_one()
    finally:
        engine.dispose()
    return float(value)


def test_a_galera_host_with_a_fast_clock_never_takes_a_live_lease(tmp_path: Path) -> None:
    with galera_cluster(3, clock_offsets={2: SKEW}) as galera:
        # The mechanism shifts what the engine reads: the fast server's "now" is ~2.5 s ahead
        # of its neighbours' (read in between, so the round trips do not count).
        before, fast, after = clock_of(galera[0]), clock_of(galera[2]), clock_of(galera[0])
        assert SKEW - 0.5 < fast - (before + after) / 2 < SKEW + 0.5

        table = unique_table()
        engine = sa.create_engine(galera[0].url, poolclass=sa.pool.NullPool)
        upgrade(engine, table)
        engine.dispose()
        tasks = [f"task-{i}" for i in range(TASKS)] + ["long-0"]
        args = node_args(tasks=TASKS, rate=RATE, work=0.2, lease=LEASE, poll=POLL, workers=4,
                         extra=["--group", "long:1:4"])
        with chaos_run(scenario="Galera host clock 2.5 s fast", backend="mysql",
                       url=galera[0].url, admin_url=galera[0].url, table=table,
                       workdir=tmp_path / "run", tasks=tasks, seed=32) as run:
            # The healthy nodes first, then the one on the fast server: a deployment adds
            # nodes one by one (two nodes started at the same instant compare clocks only
            # at their first registry write after both exist; see the Galera guide).
            run.start("n0", *args, "--url", galera[0].url)
            run.start("n1", *args, "--url", galera[1].url)
            run.warm_up(timeout=90)
            run.start("n2", *args, "--url", galera[2].url)
            run.warm_up(timeout=60)
            run.fault("database clock 2.5 s fast")
            run.sleep(RUN_FOR, sample_every=1.0, margin=LEASE)
            run.recover(timeout=30, settle=1.0, margin=LEASE)
            run.stop_all(timeout=30)
            run.verify(gap_limit=10.0, warnings_allowed=5)
        report = run.report
        stderr = run.stderr()
        told = {node: [line for line in text.splitlines() if WARNING in line]
                for node, text in stderr.items()}
        skew_told = re.search(r"reads ([0-9.]+) s ahead", "".join(told["n2"]))
        report.extra["skew_estimated_seconds"] = float(skew_told.group(1)) if skew_told else None
        ran = {node: sum(1 for e in run.events() if e["event"] == "start" and e["node"] == node)
               for node in ("n0", "n1", "n2")}
        report.extra["executions_by_node"] = ran
        print(json.dumps(report.figures(), default=str))
        report.assert_ok()
        assert report.overlaps == 0
        # The node on the fast server said so once, naming the nodes it is ahead of; the others
        # (whose clocks read behind it, which is harmless) said nothing.
        assert len(told["n2"]) == 1, told["n2"]
        assert re.search(r"node\(s\) (n0|n1)", told["n2"][0]), told["n2"][0]
        assert told["n0"] == [] and told["n1"] == []
        # Every node kept working.
        assert all(n > 0 for n in ran.values()), ran
