"""dbscheduler benchmarks: precision, throughput, idle cost, wake-up and failover, side by side
with APScheduler 3.11, APScheduler 4.0.0a6 and Procrastinate 3.10 (``python -m bench``). The
stand-alone probes of dbscheduler alone are :mod:`bench.probes`.

Only :mod:`bench.protocol` and :mod:`bench.nodes` run inside the peers' virtual environments, so
they import nothing but the standard library (and the peer under test).
"""
