"""The fields every dbscheduler log line carries: node, task and execution token.

Each line the library logs starts with the same three fields, whichever thread wrote it::

    [node=web-1 task='nightly-report' token=42] finish refused: another node owns the row now

``-`` stands for a field that does not apply (a poll is not about one task). The same values are
set on the :class:`logging.LogRecord` as ``dbscheduler_node``, ``dbscheduler_task`` and
``dbscheduler_token`` (``None`` when they do not apply), for structured (JSON) handlers.

Inside a task function the fields are those of its execution, so a task's own lines can carry
them too with :func:`current`:

>>> current()
{'node': None, 'task': None, 'token': None}

The engine's threads start inside a context holding their node's id (:func:`engine_thread`),
and each execution runs with its task and token set, so a line needs no arguments to be
attributed.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from typing import Any

__all__ = ["RECORD_FIELDS", "current", "engine_log"]

_NODE: contextvars.ContextVar[str | None] = contextvars.ContextVar("dbscheduler_node",
                                                                   default=None)
_TASK: contextvars.ContextVar[str | None] = contextvars.ContextVar("dbscheduler_task",
                                                                   default=None)
_TOKEN: contextvars.ContextVar[int | None] = contextvars.ContextVar("dbscheduler_token",
                                                                    default=None)

RECORD_FIELDS = ("dbscheduler_node", "dbscheduler_task", "dbscheduler_token")
"""The attributes every dbscheduler :class:`logging.LogRecord` carries."""


def current() -> dict[str, Any]:
    """The fields of the calling context: ``node``, ``task`` and ``token`` (or ``None``).

    >>> sorted(current())
    ['node', 'task', 'token']
    """
    return {"node": _NODE.get(), "task": _TASK.get(), "token": _TOKEN.get()}


class EngineLog(logging.LoggerAdapter[logging.Logger]):
    """A logger whose lines start with the node, task and token fields.

    Fields come from the calling context; ``extra={"task": …, "token": …}`` on one call names
    them when the line is about an execution other than the context's (the finisher thread
    writes the finishes of many executions).
    """

    def log(self, level: int, msg: object, *args: object, **kwargs: Any) -> None:
        if not self.isEnabledFor(level):
            return
        given: Mapping[str, Any] = kwargs.pop("extra", None) or {}
        fields = {**current(), **given}
        kwargs["extra"] = {f"dbscheduler_{k}": fields[k] for k in ("node", "task", "token")}
        prefix = _prefix(fields)
        if args:
            # The message is %-formatted with args: a '%' in a task name must stay literal.
            prefix = prefix.replace("%", "%%")
        kwargs.setdefault("stacklevel", 2)
        self.logger.log(level, f"{prefix} {msg}", *args, **kwargs)

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, Any]:
        return msg, kwargs  # log() does the work; kept for LoggerAdapter's other callers


def _prefix(fields: Mapping[str, Any]) -> str:
    node, task, token = fields.get("node"), fields.get("task"), fields.get("token")
    return (f"[node={node if node is not None else '-'} "
            f"task={repr(task) if task is not None else '-'} "
            f"token={token if token is not None else '-'}]")


def engine_log(name: str) -> EngineLog:
    """The logger named ``name`` (under ``dbscheduler``), with the fields on every line.

    >>> engine_log("dbscheduler.example").logger.name
    'dbscheduler.example'
    """
    return EngineLog(logging.getLogger(name), {})


def about(task: str, token: int | None = None) -> dict[str, Any]:
    """``extra=`` for one line about an execution other than the calling context's.

    >>> about("report", 7)
    {'task': 'report', 'token': 7}
    """
    return {"task": task, "token": token}


@contextmanager
def node_context(node_id: str) -> Iterator[None]:
    """Within the block, lines (and threads :func:`engine_thread` creates) belong to ``node_id``."""
    token = _NODE.set(node_id)
    try:
        yield
    finally:
        _NODE.reset(token)


@contextmanager
def execution_context(task: str, token: int) -> Iterator[None]:
    """Within the block, lines are about execution ``token`` of ``task``."""
    task_reset, token_reset = _TASK.set(task), _TOKEN.set(token)
    try:
        yield
    finally:
        _TOKEN.reset(token_reset)
        _TASK.reset(task_reset)


def engine_thread(target: Callable[..., object], name: str, *args: object,
                  daemon: bool = True) -> threading.Thread:
    """A (not yet started) thread that runs ``target`` in a copy of the creator's context
    (threads otherwise start with an empty one), so its lines carry the creator's node."""
    context = contextvars.copy_context()
    return threading.Thread(target=context.run, args=(target, *args), name=name,
                            daemon=daemon)
