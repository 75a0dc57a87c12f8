"""The CPU time the database servers used, as the kernel counts it.

Standard library only, like :mod:`bench.memory`: the throughput workload and the probes that
report the server's CPU per execution read it the same way.
"""

from __future__ import annotations

import os
from pathlib import Path

SERVERS = ("postgres", "mariadbd", "mysqld")
"""Process names of the database servers counted (every local one: the private servers the
benchmark measures, and any other, which should be idle while it measures)."""


def server_cpu() -> float:
    """CPU seconds used so far by the local database server processes (user and system)."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            name, _, rest = stat.read_text().rpartition(")")
        except OSError:
            continue
        if name.rsplit("(", 1)[-1] in SERVERS:
            fields = rest.split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")
