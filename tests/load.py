"""Run a command (the test suite) while busy processes keep every core loaded.

The suite must pass on a machine busy with other work; this is how to check it::

    .venv/bin/python -m tests.load -- .venv/bin/python -m pytest
    .venv/bin/python -m tests.load --busy 2 --runs 5 -- .venv/bin/python -m pytest -x

``--busy`` busy processes (default: one per core) spin for as long as the command runs;
``--runs N`` runs it N times in a row (stopping at the first failure) and prints each run's
time and exit status. The busy processes end with the command, and by themselves if this
process is killed (each checks that its parent is still the one that started it).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

SPIN = """
import os, sys
parent = int(sys.argv[1])
while os.getppid() == parent:
    for _ in range(200_000):
        pass
"""


def start_busy(n: int) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen([sys.executable, "-c", SPIN, str(os.getpid())],
                             stdin=subprocess.DEVNULL) for _ in range(n)]


def stop_busy(busy: list[subprocess.Popen[bytes]]) -> None:
    for proc in busy:
        proc.kill()
    for proc in busy:
        proc.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.load", description=__doc__)
    parser.add_argument("--busy", type=int, default=os.cpu_count() or 2,
                        help="busy processes (default: one per core)")
    parser.add_argument("--runs", type=int, default=1, help="consecutive runs of the command")
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="the command, after --")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --, e.g. -- .venv/bin/python -m pytest")
    results: list[tuple[int, float]] = []
    busy = start_busy(args.busy)
    try:
        for run in range(1, args.runs + 1):
            print(f"== load: run {run}/{args.runs} with {args.busy} busy processes: "
                  f"{' '.join(command)}", file=sys.stderr, flush=True)
            began = time.monotonic()
            code = subprocess.call(command)
            results.append((code, time.monotonic() - began))
            if code != 0:
                break
    except KeyboardInterrupt:
        return 130
    finally:
        stop_busy(busy)
        for run, (code, seconds) in enumerate(results, 1):
            minutes, secs = divmod(round(seconds), 60)
            print(f"== load: run {run}: exit {code} in {minutes} min {secs:02d} s",
                  file=sys.stderr, flush=True)
    return next((code for code, _ in results if code != 0), 0)


if __name__ == "__main__":
    sys.exit(main())
