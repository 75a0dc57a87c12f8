"""``python -m bench [--quick] [--profile]``: see :mod:`bench.run`."""

from bench.run import main

raise SystemExit(main())
