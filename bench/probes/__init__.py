"""Stand-alone probes of dbscheduler alone, each its own ``python -m bench.probes.<name>``.

The comparison suite (``python -m bench``: every workload on every system, side by side with
the peers) is the rest of :mod:`bench`. A probe measures one question about dbscheduler itself
(the cost of a pick, a backlog drained by several nodes, statements per execution, the
surfaces at scale …) and reuses the suite's helpers (:mod:`bench.infra`, :mod:`bench.stats`,
:mod:`bench.private_servers`); docs/benchmarks.md lists them and their figures.
"""
