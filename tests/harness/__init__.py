"""The one harness for tests that run real node processes (conformance and chaos suites).

- ``node.py``: the node program, ``python -m tests.harness.node`` (tasks, faults to play, one
  JSON event line per execution step);
- ``cluster.py``: :class:`Cluster`, which starts, signals, stops and reaps those processes and
  reads their logs;
- ``runs.py``: the logs turned into :class:`Run` executions, and the no-overlap check;
- ``inprocess.py``: a node inside the test process (a started Scheduler with tasks run on
  demand), with ``seed`` and ``db_now`` for direct access to the rows.
"""

from tests.harness.cluster import ROOT, Cluster, Exit, cluster
from tests.harness.runs import Run, assert_no_overlap, runs_from

__all__ = ["ROOT", "Cluster", "Exit", "Run", "assert_no_overlap", "cluster", "runs_from"]
