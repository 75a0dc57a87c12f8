"""``isolation="process"``: a task function run in a child process that can be killed.

The child is started with ``forkserver`` (``spawn`` where there is none), never ``fork``: a
forked copy of a node would inherit its threads' locks and its database connections. It
imports the function by module and name, so only importable (module-level) functions can run
this way. The parent — the worker thread of the node that picked the row — keeps the lease
(the node's heartbeat goes on), forwards a stop request, and kills the child a few seconds
after it if the child has not returned by then. A child whose node is gone (killed, crashed)
kills itself: no orphan outlives its node.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib
import multiprocessing
import os
import signal
import threading
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from ..context import Result, TaskContext
from ..errors import ChildFailed
from ..logfields import about, engine_log
from .execution import Execution, describe_error, truncate

__all__ = ["KILL_AFTER", "ChildFailed", "Children", "check_importable", "run_in_child",
           "warm_up"]

log = engine_log("dbscheduler.executor")

KILL_AFTER = 3.0
"""Seconds a child has to return after its stop was requested before it is killed."""
ORPHAN_CHECK = 0.2
"""How often a child checks that its node is still alive, in seconds."""


def check_importable(fn: Callable[..., Any], where: str) -> None:
    """``ValueError`` unless ``fn`` looks importable by module and qualified name (a child
    process finds it that way): not a lambda, a nested function or a bound object."""
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or "<" in qualname:
        raise ValueError(
            f"{where}: isolation='process' runs the function in a child process, which "
            f"imports it by name: use a function defined at module level (importable as "
            f"module.name), not {getattr(fn, '__qualname__', None) or fn!r}"
        )


def resolve(module: str, qualname: str) -> Callable[..., Any]:
    """The function ``module.qualname``, imported; ``ValueError`` saying why not."""
    try:
        found: Any = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as exc:
        raise ValueError(
            f"isolation='process': cannot import {module}.{qualname} in the child process "
            f"({describe_error(exc)}); the function must be importable by that name"
        ) from None
    if not callable(found):
        raise ValueError(f"isolation='process': {module}.{qualname} is not callable")
    return found  # type: ignore[no-any-return]


def _mp_context() -> Any:  # a SpawnContext or ForkServerContext
    methods = multiprocessing.get_all_start_methods()
    if "forkserver" not in methods:
        return multiprocessing.get_context("spawn")
    mp = multiprocessing.get_context("forkserver")
    # The server imports the application (its main module) and this module once; every child
    # is a fork of it, ready at once. (No effect once the server runs.)
    mp.set_forkserver_preload(["__main__", __name__])
    return mp


def warm_up() -> None:
    """Start the fork server now, in the background, so that the first isolated execution
    does not wait for it (it imports the application's main module once)."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return
    from multiprocessing import forkserver

    def start() -> None:
        try:
            _mp_context()
            forkserver.ensure_running()
        except Exception as exc:  # the first isolated execution tries again and says why
            log.debug("could not start the fork server ahead of time: %s", exc)

    threading.Thread(target=start, name="dbscheduler-forkserver", daemon=True).start()


class Children:
    """The child processes of one node's running isolated executions."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: set[multiprocessing.process.BaseProcess] = set()

    def add(self, proc: multiprocessing.process.BaseProcess) -> None:
        with self._lock:
            self._running.add(proc)

    def discard(self, proc: multiprocessing.process.BaseProcess) -> None:
        with self._lock:
            self._running.discard(proc)

    def kill_all(self) -> int:
        """Kill every child still running (a shutdown that cannot wait any longer)."""
        with self._lock:
            procs = list(self._running)
        for proc in procs:
            _kill(proc)
        return len(procs)


def _kill(proc: multiprocessing.process.BaseProcess) -> None:
    with contextlib.suppress(OSError, ValueError):  # already gone, or closed
        proc.kill()


def run_in_child(ex: Execution, children: Children, kill_after: float = KILL_AFTER) -> Any:
    """Run ``ex``'s function in a child process and return its value (``None`` or a
    :class:`Result`). Raises the function's error as :class:`ChildFailed` with its text, and
    :class:`ChildFailed` when the child crashed or was killed: ``kill_after`` s after its
    timeout, a cancel or a lost lease if it has not returned by then (a shutdown's stop
    request is only forwarded; the shutdown kills what it cannot wait for)."""
    task = ex.task
    fn = task.fn
    try:  # a handler's function is checked here: rows choose their isolation at run time
        check_importable(fn, f"task {task.name!r}")
    except ValueError as exc:
        raise ChildFailed(str(exc)) from None
    module, qualname = fn.__module__, fn.__qualname__
    fields = {f.name: getattr(ex.ctx, f.name) for f in dataclasses.fields(TaskContext)
              if f.name != "stop_requested"}
    mp = _mp_context()
    receive, send = mp.Pipe(duplex=False)
    stop = mp.Event()
    proc = mp.Process(
        target=_child_main,
        args=(send, module, qualname, fields, task.takes_context, os.getpid(), stop),
        name=f"dbscheduler-task-{task.name}"[:60],
        daemon=True,  # terminated by multiprocessing if the node exits normally
    )
    proc.start()
    send.close()
    children.add(proc)
    kill_at: float | None = None
    message: tuple[str, Any, str] | None = None
    try:
        while True:
            if receive.poll(0.05):
                try:
                    message = receive.recv()
                except (EOFError, OSError):
                    message = None
                break
            if not proc.is_alive():
                if receive.poll(0):  # the answer arrived as the child exited
                    try:
                        message = receive.recv()
                    except (EOFError, OSError):
                        message = None
                break
            if ex.ctx.stop_requested.is_set():
                stop.set()
                # A shutdown's stop request waits for the shutdown's own timeout (then
                # Children.kill_all); a timeout, a cancel or a lost lease give KILL_AFTER.
                if kill_at is None and (ex.timed_out or ex.cancel_requested or ex.lease_lost):
                    kill_at = time.monotonic() + kill_after
                elif kill_at is not None and time.monotonic() >= kill_at:
                    log.warning("the child process (pid %s) did not stop within %s s of its "
                                "stop request; killing it", proc.pid, kill_after)
                    _kill(proc)
                    kill_at = float("inf")
        proc.join(timeout=5)
        if proc.is_alive():  # answered, yet not exiting: it must not outlive its execution
            _kill(proc)
            proc.join(timeout=5)
    finally:
        children.discard(proc)
        receive.close()
    if message is None:
        raise ChildFailed(_death(proc.exitcode))
    kind, value, detail = message
    if kind == "ok":
        return value
    if detail:
        log.error("failed in its child process:\n%s", detail.rstrip())
    raise ChildFailed(value)


def _death(code: int | None) -> str:
    if code is None:
        return "the child process did not exit"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"the child process was killed by {name} ({-code})"
    return f"the child process exited with code {code} without a result"


# -- in the child ----------------------------------------------------------------------------
def _child_main(send: Connection, module: str, qualname: str, fields: dict[str, Any],
                takes_context: bool, node_pid: int, stop: Any) -> None:
    ctx = TaskContext(**fields, stop_requested=threading.Event())
    threading.Thread(target=_watch, args=(node_pid, stop, ctx), name="dbscheduler-child-watch",
                     daemon=True).start()
    try:
        fn = resolve(module, qualname)
        args = (ctx,) if takes_context else ()
        value = fn(*args)
        if asyncio.iscoroutine(value):
            value = asyncio.run(value)
        if value is not None and not isinstance(value, Result):
            log.warning("the function returned %s in its child process; the value is ignored",
                        truncate(repr(value)), extra=about(ctx.name, ctx.total_attempt))
            value = None
        try:
            send.send(("ok", value, ""))
        except Exception as exc:  # a state that cannot be pickled
            send.send(("error", f"the child's result cannot be sent back: "
                                f"{describe_error(exc)}", ""))
    except BaseException as exc:
        send.send(("error", describe_error(exc), traceback.format_exc()))
    finally:
        send.close()


def _watch(node_pid: int, stop: Any, ctx: TaskContext) -> None:
    """Forward the stop request, and end this process when its node is gone."""
    while True:
        if stop.wait(ORPHAN_CHECK):
            ctx.stop_requested.set()
        try:
            os.kill(node_pid, 0)
        except ProcessLookupError:
            os._exit(70)
        except PermissionError:  # the pid now belongs to someone else's process
            os._exit(70)
        if ctx.stop_requested.is_set():
            time.sleep(ORPHAN_CHECK)
