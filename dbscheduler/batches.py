"""Keyed delayed batches: items pushed under a key are delivered together when the key is due.

``scheduler.push(key, item, handler="digest", ontime=…, update="always")`` from any process
queues ``item`` under ``(handler, key)``; when the key is due, one node calls the batch
handler ``fn(ctx, items)`` with every item pushed before that delivery started, in push order
(a digest mail instead of ten mails)::

    @scheduler.batch_handler("digest")
    def digest(ctx: TaskContext, items: list[Any]) -> None:
        send_mail(to=ctx.name.split("/", 1)[1], lines=items)

    scheduler.push("ann@example.com", {"event": "comment"}, handler="digest", ontime=600)

The rules (exfe-bus's queue):

- a key starting with ``-`` is never merged: each push is its own delivery;
- ``update="always"``: the key becomes due at this push's ``ontime``; ``"once"``: only when
  the key has no pending items (a new batch), later pushes join without moving it; after a
  failed delivery the next push sets the due time whatever its ``update`` says;
- a failed delivery is retried by the handler's failure settings (by default
  ``GeometricBackoff(1 s, max_delay=5 min)``, never giving up): items are never dropped
  silently, only by :meth:`~dbscheduler.Client.drop`;
- a delivery takes exactly the items pushed before it was picked; items pushed while it runs
  wait for the next one, due when their pushes said; a successful delivery removes exactly its
  items, fenced by its token, so every item is in exactly one successful delivery, and a node
  that crashes mid-delivery leaves them to be delivered again (``ctx.attempt > 1``).

Each pending key is a one-off row of the tasks table named ``<handler>/<key>`` (a ``-`` key
gets a unique suffix), so leases, fencing, takeover, listeners and the dashboard work on it
unchanged; its items live in ``<table>_items``.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import math
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Literal, get_args

from ._engine.execution import TaskDef, TaskFunction
from ._store import StoreBase, encode_state, validate_name
from ._store.batches import KeyRow, Push, drop_key, pending_keys, push_item, read_items
from ._store.batches import remove_delivered as _remove
from .context import Result, TaskContext
from .failures import FailureSettings, GeometricBackoff, NoRetry
from .logfields import engine_log
from .schedules import Once
from .table import MAX_ITEM_BYTES, MAX_NAME_LENGTH

__all__ = [
    "DEFAULT_BATCH_FAILURE",
    "BatchFunction",
    "BatchInfo",
    "Update",
    "batch_failure",
    "build_push",
    "check_batch_handler_name",
    "delivers_batches",
    "delivery",
    "drop",
    "list_batches",
    "push",
    "row_name",
]

log = engine_log("dbscheduler.batches")

Update = Literal["always", "once"]
UPDATES: tuple[str, ...] = get_args(Update)

DEFAULT_BATCH_FAILURE = GeometricBackoff(timedelta(seconds=1), max_delay=timedelta(minutes=5))
"""A batch handler's failure setting unless it names one: retry after 1 s, 2 s, 4 s … up to
every 5 minutes, forever."""

GIVE_UP_CEILING = timedelta(minutes=5)
"""When a custom failure setting answers "no retry", a batch is retried after this instead:
its items are never dropped silently."""

SEPARATE = "-"
"""A key starting with this is never merged: each push is its own delivery."""
_SUFFIX_HEX = 16
"""Hex digits of the unique suffix of a ``-`` key's row (``<handler>/<key>#<suffix>``)."""
_MAX_UNIX = 253402300799  # 9999-12-31T23:59:59Z

BatchFunction = Callable[[TaskContext, list[Any]], Any]
"""``fn(ctx, items)``: a batch handler (a coroutine function works too)."""


# -- names -------------------------------------------------------------------------------


def check_batch_handler_name(name: object, *, internal: bool = False) -> str:
    """A batch handler's name: a task name without ``/`` (it separates handler and key in
    the key's row name) and, unless ``internal``, not in the reserved ``dbscheduler.``
    namespace. Raises ``ValueError`` saying what is wrong."""
    try:
        validate_name(name)
    except ValueError as exc:
        raise ValueError(f"batch handler {str(name)[:60]!r}: {exc}") from None
    assert isinstance(name, str)
    if "/" in name:
        raise ValueError(f"batch handler {name!r}: the name may not contain '/' (it separates "
                         "the handler from the key in the key's row name)")
    if name.startswith("dbscheduler.") and not internal:
        raise ValueError(f"batch handler {name!r}: names starting with 'dbscheduler.' are "
                         "reserved for built-in handlers")
    return name


def _check_key(key: object, handler: str) -> str:
    if not isinstance(key, str):
        raise ValueError(f"key must be a string, got {type(key).__name__}")
    try:
        validate_name(key)
    except ValueError as exc:
        raise ValueError(f"key: {str(exc).replace('task name', 'key')}") from None
    room = MAX_NAME_LENGTH - _units(handler) - 1 - (1 + _SUFFIX_HEX if _separate(key) else 0)
    if _units(key) > room:
        raise ValueError(
            f"key {key[:40]!r}… is {_units(key)} UTF-16 code units long; with handler "
            f"{handler!r} at most {room} fit (the key's row name "
            f"'<handler>/<key>' is limited to {MAX_NAME_LENGTH})"
        )
    return key


def _units(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def _separate(key: str) -> bool:
    return key.startswith(SEPARATE)


def row_name(handler: str, key: str) -> str:
    """The tasks-table row of a (merged) key: ``<handler>/<key>``.

    >>> row_name("digest", "ann@example.com")
    'digest/ann@example.com'
    """
    return f"{handler}/{key}"


# -- pushing -----------------------------------------------------------------------------


def _ontime(value: object) -> datetime | None:
    """``ontime`` as an aware UTC datetime; ``None`` stays ``None`` (the database's now)."""
    if value is None:
        return None
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"ontime={value.isoformat()} is naive; pass an aware datetime "
                             "(e.g. with tzinfo=timezone.utc) or Unix seconds")
        return value.astimezone(timezone.utc)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"ontime must be an aware datetime or Unix seconds, got {value!r}")
    if not math.isfinite(value) or not 0 <= value <= _MAX_UNIX:
        raise ValueError(f"ontime must be Unix seconds between 0 and {_MAX_UNIX}, got {value!r}")
    return datetime.fromtimestamp(value, timezone.utc)


def build_push(handler: str, key: str, item: Any, *, ontime: object = None,
               update: object = "always", data: Any = None) -> Push:
    """Check a push and build what to write. ``ValueError`` names the field; nothing is
    written before this passes."""
    check_batch_handler_name(handler, internal=True)
    _check_key(key, handler)
    if update not in UPDATES:
        raise ValueError(f"update must be 'always' or 'once', got {update!r}")
    at = _ontime(ontime)
    try:
        text = encode_state(item)
    except ValueError as exc:
        raise ValueError(f"item: {str(exc).replace('state', 'item')}") from None
    if text is not None and len(text.encode("utf-8")) > MAX_ITEM_BYTES:  # pragma: no cover
        raise ValueError(f"item is larger than {MAX_ITEM_BYTES:,} bytes of JSON")
    name = row_name(handler, key)
    if _separate(key):
        name = f"{name}#{secrets.token_hex(_SUFFIX_HEX // 2)}"
    first = at if at is not None else datetime.now(timezone.utc)
    return Push(name=name, handler=handler, key=key, item=text, ontime=at,
                moves=update == "always" or _separate(key),
                schedule=Once(first).describe(), data=encode_state(data))


def push(store: StoreBase, key: str, item: Any, *, handler: str, ontime: object = None,
         update: object = "always", data: Any = None) -> None:
    """Queue ``item`` under ``(handler, key)`` (see :meth:`dbscheduler.Client.push`)."""
    push_item(store, build_push(handler, key, item, ontime=ontime, update=update, data=data))


def drop(store: StoreBase, key: str, *, handler: str) -> int:
    """Remove the pending items of ``(handler, key)``; returns how many."""
    check_batch_handler_name(handler, internal=True)
    _check_key(key, handler)
    return drop_key(store, handler, key, None if _separate(key) else [row_name(handler, key)])


# -- what is pending ---------------------------------------------------------------------


@dataclass(frozen=True)
class BatchInfo:
    """One key with items waiting, as :meth:`dbscheduler.Client.batches` lists it.

    ``due_at`` is when the key is next delivered (``None`` while it is delivered, or when its
    items wait without a row: the push that wrote them stopped before it wrote the row, and
    the key's next push brings them along).
    """

    handler: str
    key: str
    name: str
    """The key's row in the tasks table (``ctx.name`` of its deliveries)."""
    items: int
    due_at: datetime | None
    running: bool
    locked_by: str | None
    attempt: int
    """Failed deliveries of the current items (0: none failed)."""
    last_status: str | None
    last_error: str | None
    paused: bool
    first_pushed_at: datetime
    last_pushed_at: datetime
    data: Any = None
    """The key's data (the HTTP handler's ``{"method", "url"}``), or ``None``."""

    def to_dict(self) -> dict[str, Any]:
        """The fields as JSON-ready values (ISO 8601 UTC timestamps)."""
        return {k: v.isoformat() if isinstance(v, datetime) else v
                for k, v in self.__dict__.items()}


def _info(row: KeyRow) -> BatchInfo:
    r = row.row or {}
    running = r.get("locked_by") is not None
    # While a delivery runs, the row's attempt counts it too: only finished ones failed.
    failed = max(int(r.get("attempt") or 0) - (1 if running else 0), 0)
    data = None
    if r.get("data") is not None:
        try:
            data = json.loads(r["data"])
        except ValueError:
            data = None
    return BatchInfo(
        handler=row.handler, key=row.key, name=row.name, items=row.items,
        due_at=None if running or not r else r["next_process_at"], running=running,
        locked_by=r.get("locked_by"), attempt=failed,
        last_status=r.get("last_status"), last_error=r.get("last_error"),
        paused=bool(r.get("paused")), first_pushed_at=row.first_pushed_at,
        last_pushed_at=row.last_pushed_at, data=data,
    )


def list_batches(store: StoreBase, handler: str | None = None, limit: int | None = None
                 ) -> list[BatchInfo]:
    """Every key with pending items (of ``handler``), soonest due first."""
    return [_info(r) for r in pending_keys(store, handler, limit)]


# -- delivering --------------------------------------------------------------------------


class _KeepRetrying(FailureSettings):
    """A custom failure setting that never gives up: where it answers "no retry", retry
    after :data:`GIVE_UP_CEILING`."""

    def __init__(self, inner: FailureSettings) -> None:
        self.inner = inner

    def retry_delay(self, attempt: int) -> timedelta | None:
        return self.inner.retry_delay(attempt) or GIVE_UP_CEILING

    def __repr__(self) -> str:
        return f"{self.inner!r} (never giving up)"


def batch_failure(name: str, on_failure: FailureSettings | None) -> FailureSettings:
    """The failure setting a batch handler runs with; ``ValueError`` for one that would drop
    items (``NoRetry``, a ``max_attempts``)."""
    if on_failure is None:
        return DEFAULT_BATCH_FAILURE
    if not isinstance(on_failure, FailureSettings):
        raise ValueError(f"batch handler {name!r}: on_failure must be a FailureSettings, got "
                         f"{on_failure!r}")
    if isinstance(on_failure, NoRetry) or getattr(on_failure, "max_attempts", None) is not None:
        raise ValueError(
            f"batch handler {name!r}: on_failure={on_failure!r} gives up, and a batch that "
            "gives up would lose its items; use a backoff without max_attempts (the default "
            "is GeometricBackoff(1 s, max_delay=5 min)) and drop() a key to discard it"
        )
    return _KeepRetrying(on_failure)


_DELIVERY = "__dbscheduler_batch_handler__"


def delivers_batches(task: TaskDef) -> bool:
    """Whether ``task`` runs a batch handler's deliveries (its finish keeps a key that
    received items meanwhile)."""
    return getattr(task.fn, _DELIVERY, None) is not None


def _check_function(name: str, fn: object) -> bool:
    """``fn`` takes ``(ctx, items)``; returns whether it is a coroutine function."""
    if not callable(fn):
        raise ValueError(f"batch handler {name!r}: the function is not callable: {fn!r}")
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        params = None
    if params is not None:
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY,
                                                       p.POSITIONAL_OR_KEYWORD)]
        required = [p for p in positional if p.default is p.empty]
        varargs = any(p.kind is p.VAR_POSITIONAL for p in params)
        if len(required) > 2 or (len(positional) < 2 and not varargs):
            raise ValueError(
                f"batch handler {name!r}: the function must take two arguments (ctx, items), "
                f"but {getattr(fn, '__qualname__', fn)!r} takes {len(positional)}"
            )
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None))  # noqa: B004 - callable objects with async __call__


def _decode(name: str, taken: list[tuple[int, str | None]]) -> list[Any]:
    values = []
    for item_id, text in taken:
        try:
            values.append(None if text is None else json.loads(text))
        except (ValueError, RecursionError) as exc:
            raise ValueError(f"item {item_id} of {name!r} is not JSON ({exc}); drop the key "
                             "to discard it") from None
    return values


def _finished(store: StoreBase, ctx: TaskContext, ids: list[int], value: Any) -> Any:
    """After the handler returned ``value``: a failure keeps the items; a success removes
    exactly the delivered ones, fenced by this delivery's token."""
    if isinstance(value, Result) and value.status == "error":
        return Result.error(value.message)
    removed = _remove(store, ctx.name, ctx.total_attempt, ctx.node_id, ctx.started_at, ids)
    if removed < len(ids):
        # The lease ended (another node delivers these items again), or drop() ran.
        log.warning("batch %r: delivered %d item(s) but removed %d: the lease was lost "
                    "(they are delivered again) or the key was dropped meanwhile",
                    ctx.name, len(ids), removed)
    return None


def delivery(store: StoreBase, name: str, fn: BatchFunction) -> TaskFunction:
    """The task function that delivers one key's batch with the batch handler ``fn``."""
    if _check_function(name, fn):
        async def deliver_async(ctx: TaskContext) -> Any:
            taken = await asyncio.to_thread(read_items, store, ctx.name, ctx.started_at)
            if not taken:
                return None  # nothing left (dropped, or delivered before a crash)
            value = await fn(ctx, _decode(ctx.name, taken))
            return await asyncio.to_thread(_finished, store, ctx, [i for i, _ in taken], value)

        setattr(deliver_async, _DELIVERY, name)
        return deliver_async

    def deliver(ctx: TaskContext) -> Any:
        taken = read_items(store, ctx.name, ctx.started_at)
        if not taken:
            return None  # nothing left (dropped, or delivered before a crash)
        value = fn(ctx, _decode(ctx.name, taken))
        return _finished(store, ctx, [i for i, _ in taken], value)

    setattr(deliver, _DELIVERY, name)
    return deliver
