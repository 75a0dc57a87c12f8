"""``python -m tests.chaos.frozen_node [--start-when PATH] …``: the test node program, gated.

``--start-when PATH`` (first on the command line) makes the process import everything, then
wait until PATH exists before it starts the node: a node that takes over is ready the moment
the test needs it, so a slow interpreter start on a busy machine never counts as a slow
takeover. The freeze itself is the library's fault point (``DBSCHEDULER_FREEZE_AT``), which
stops the very thread that reached it.
"""

from __future__ import annotations

import importlib
import sys
import time
from pathlib import Path
from types import ModuleType


def wait_for_gate(argv: list[str]) -> list[str]:
    """Without ``--start-when PATH``: ``argv``. With it: import what the node needs, wait
    until PATH exists, and return the rest."""
    if argv[:1] != ["--start-when"]:
        return argv
    gate, rest = Path(argv[1]), argv[2:]
    import sqlalchemy as sa

    import dbscheduler  # noqa: F401 - imported now, not when the gate opens

    node_module()

    url = rest[rest.index("--url") + 1]
    sa.make_url(url).get_dialect().import_dbapi()  # the driver too
    while not gate.exists():
        time.sleep(0.005)
    return rest


def node_module() -> ModuleType:
    """The node program, ``tests/harness/node.py``."""
    return importlib.import_module("tests.harness.node")


if __name__ == "__main__":
    args = wait_for_gate(sys.argv[1:])
    node_module().main(args)
