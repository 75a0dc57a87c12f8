"""``python -m dbscheduler``: the same command line as the ``dbscheduler`` script."""

from __future__ import annotations

from dbscheduler.cli import main

if __name__ == "__main__":
    main()
