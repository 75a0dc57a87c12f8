"""Node processes forked from one that has already imported what they import.

A node process spends most of its short life starting: SQLAlchemy, the drivers and
dbscheduler take about a second of CPU to import on a slow machine of two cores, and the
suite starts some 850 nodes. Each test process (each xdist worker) therefore keeps one
*zygote*: a process that imports all of that once and then forks a node for each request.

A forked node is a process of its own like any other: its own pid, memory and connections
(the zygote opens none), killed, frozen and reaped as before, its exit code or signal reported
like :class:`subprocess.Popen`'s. What it shares is only the work of starting. A node whose
environment matters at import time (:data:`READ_AT_IMPORT`: ``DBSCHEDULER_FREEZE_AT`` is read
when the engine's fault points are imported) is started with ``python -m tests.harness.node``
as before (:meth:`tests.harness.cluster.Cluster.start`).

:func:`main` is the zygote: it reads one JSON request per line on its
standard input and answers on its standard output with ``{"pid": …}`` for each fork and
``{"exit": pid, "code": …}`` for each node that ended; it ends when its input closes (its
nodes then see their parent gone, and their ``--watchdog`` shuts them down).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import queue
import select
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[2]

READ_AT_IMPORT = ("DBSCHEDULER_FREEZE_AT",)
"""Environment variables a node reads when it imports dbscheduler: a node whose environment
has one is started as its own program, and the zygote never has them."""


class ForkedNode:
    """A node forked by the zygote, with the part of :class:`subprocess.Popen`'s interface
    the tests use (``pid``, ``returncode``, ``poll``, ``wait``, ``send_signal``, ``kill``,
    ``terminate``)."""

    def __init__(self, zygote: Zygote, pid: int, fork: int, args: list[str]) -> None:
        self._zygote = zygote
        self.pid = pid
        self._fork = fork
        self.args = args
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._zygote.exit_code(self._fork, 0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self._zygote.exit_code(self._fork, timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        # As Popen: never signal a process that has been reaped (its pid may be another's).
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


class Zygote:
    """The test process's side: sends requests, reads the zygote's answers in a thread."""

    def __init__(self) -> None:
        self._proc = subprocess.Popen(
            # Not -m: the package imports this module first, and runpy would warn of it.
            [sys.executable, "-c", "from tests.harness.zygote import main; main()"], cwd=ROOT,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            env={**{k: v for k, v in os.environ.items() if k not in READ_AT_IMPORT},
                 "PYTHONPATH": str(ROOT)},
        )
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._requests: IO[bytes] = self._proc.stdin
        # Exit codes by fork, not by pid: a pid is used again once its process is reaped
        # (a run of the suite goes round the pids), and a node must not take an earlier
        # one's exit for its own (it would then never be signalled).
        self._forked: queue.Queue[tuple[int, int]] = queue.Queue()
        self._forks = 0
        self._live: dict[int, int] = {}
        self._exits: dict[int, int] = {}
        self._ended = threading.Condition()
        self._closed = False
        self._request_lock = threading.Lock()
        threading.Thread(target=self._read, args=(self._proc.stdout,), name="zygote-reader",
                         daemon=True).start()

    def _read(self, answers: IO[bytes]) -> None:
        for line in answers:
            message = json.loads(line)
            if "pid" in message:
                self._forks += 1
                self._live[message["pid"]] = self._forks
                self._forked.put((message["pid"], self._forks))
            else:
                with self._ended:
                    self._exits[self._live.pop(message["exit"])] = message["code"]
                    self._ended.notify_all()
        with self._ended:  # the zygote is gone: no exit will be reported any more
            self._closed = True
            self._ended.notify_all()

    def alive(self) -> bool:
        return self._proc.poll() is None

    def spawn(self, argv: list[str], env: dict[str, str], output: Path) -> ForkedNode:
        """Fork a node running ``tests.harness.node`` with ``argv``, its standard output and
        error appended to ``output``."""
        request = {"argv": argv, "env": env, "cwd": str(ROOT), "output": str(output)}
        with self._request_lock:  # one fork at a time: the next pid answered is this one's
            self._requests.write(json.dumps(request).encode() + b"\n")
            self._requests.flush()
            pid, fork = self._forked.get(timeout=60)
        return ForkedNode(self, pid, fork, ["tests.harness.node", *argv])

    def exit_code(self, fork: int, timeout: float | None) -> int | None:
        """The exit code of the ``fork``-th node (negative: the signal that ended it), or
        None if it has not ended within ``timeout`` seconds. RuntimeError if the zygote has
        gone without reporting it (a wait would never end)."""
        with self._ended:
            self._ended.wait_for(lambda: fork in self._exits or self._closed, timeout)
            if fork not in self._exits and self._closed:
                raise RuntimeError(f"the zygote ended before node fork #{fork} did")
            return self._exits.get(fork)

    def close(self) -> None:
        self._requests.close()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


_zygote: Zygote | None = None
_zygote_lock = threading.Lock()


def zygote() -> Zygote:
    """This process's zygote, started on first use (and again if it died)."""
    global _zygote
    with _zygote_lock:
        if _zygote is None or not _zygote.alive():
            _zygote = Zygote()
            atexit.register(_zygote.close)
        return _zygote


# -- the zygote itself ----------------------------------------------------------------------------
def _preload() -> None:
    """Import what every node imports, the database drivers included."""
    import dbscheduler  # noqa: F401
    import tests.harness.node  # noqa: F401

    for module in ("sqlalchemy.dialects.postgresql.psycopg", "sqlalchemy.dialects.mysql.pymysql",
                   "sqlalchemy.dialects.sqlite.pysqlite", "psycopg", "pymysql"):
        # A driver this machine does not have: its nodes do not import it either.
        with contextlib.suppress(ImportError):
            __import__(module)


def _serve() -> dict[str, Any] | None:
    """Fork a node for each request. Returns the request in each forked child (which then
    runs it); returns None in the zygote once its input has closed."""
    _preload()
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    quiet = os.open(os.devnull, os.O_RDWR)
    os.dup2(quiet, 1)  # the answers' pipe is for answers only
    children: set[int] = set()
    pending = b""
    while True:
        ready, _, _ = select.select([0], [], [], 0.02)
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            children.discard(pid)
            answers.write(json.dumps({"exit": pid, "code": os.waitstatus_to_exitcode(status)})
                          + "\n")
        if not ready:
            continue
        chunk = os.read(0, 65536)
        if not chunk:
            return None
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            request: dict[str, Any] = json.loads(line)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                answers.close()
                os.dup2(quiet, 0)
                out = os.open(request["output"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                os.dup2(out, 1)
                os.dup2(out, 2)
                os.close(out)
                os.close(quiet)
                os.chdir(request["cwd"])
                os.environ.clear()
                os.environ.update(request["env"])
                return request
            children.add(pid)
            answers.write(json.dumps({"pid": pid}) + "\n")


def main() -> None:
    """Be the zygote; in each forked child, run its node and return (the interpreter then
    exits as ``python -m tests.harness.node`` would)."""
    forked = _serve()
    if forked is not None:
        from tests.harness import node

        sys.argv = ["tests.harness.node", *forked["argv"]]
        node.main(forked["argv"])
