"""``python -m tests.servers watch OWNER_PID OWNER_START DIRECTORY``: the watchdog process
(see tests/servers/watchdog.py)."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.servers.watchdog import watch


def main(argv: list[str]) -> int:
    if len(argv) == 4 and argv[0] == "watch":
        watch(int(argv[1]), argv[2], Path(argv[3]))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
