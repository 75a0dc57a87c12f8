"""Three scheduler nodes on a private three-node MariaDB Galera cluster, each node writing
through a Galera node of its own (the shape most likely in production), and one Galera node
killed mid-run: no task ever runs twice at once, every task runs on, and the scheduler node cut
off with its Galera node loses its leases to the others."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from dbscheduler.migrate import upgrade
from tests.chaos.cluster import chaos_run, node_args
from tests.databases import unique_table
from tests.topologies.galera import galera_cluster

pytestmark = pytest.mark.topologies

LEASE, RATE, POLL = 3.0, 0.4, 0.25
TASKS = 7


def test_a_galera_node_killed_under_three_scheduler_nodes(tmp_path: Path) -> None:
    with galera_cluster(3) as galera:
        table = unique_table()
        engine = sa.create_engine(galera[0].url, poolclass=sa.pool.NullPool)
        upgrade(engine, table)
        engine.dispose()
        tasks = [f"task-{i}" for i in range(TASKS)]
        args = node_args(tasks=TASKS, rate=RATE, work=0.2, lease=LEASE, poll=POLL, workers=4)
        with chaos_run(scenario="Galera node killed", backend="mysql", url=galera[0].url,
                       admin_url=galera[0].url, table=table, workdir=tmp_path / "run",
                       tasks=tasks, seed=33) as run:
            for i, node in enumerate(galera):
                run.start(f"n{i}", *args, "--url", node.url)
            run.warm_up(timeout=90)
            run.sleep(2.0)
            galera[2].kill()
            run.fault("Galera node killed")
            run.recover(timeout=60, settle=2.0)
            run.stop_all(timeout=30)
            run.verify(gap_limit=None, warnings_allowed=run.report.faults.total() + 20,
                       ambiguous_ok=True)
        report = run.report
        print(json.dumps(report.figures(), default=str))
        report.problems.pop("graceful stop", None)  # n2 cannot reach its database
        report.assert_ok()
        assert report.overlaps == 0
