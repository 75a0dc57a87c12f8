"""The batch half of :class:`~dbscheduler.Scheduler` (a mixin): declaring batch handlers,
the built-in HTTP delivery handler, and push / drop / batches delegating to its client."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ._store import Store
from ._wakeup import Wakeup
from .batches import BatchFunction, BatchInfo, batch_failure, check_batch_handler_name, delivery
from .client import Client
from .failures import FailureSettings
from .runtime import Handlers

__all__ = ["Batching"]

B = TypeVar("B", bound=BatchFunction)


class Batching:
    """Keyed delayed batches on a :class:`~dbscheduler.Scheduler` (the scheduler holds the
    attributes declared here)."""

    client: Client
    _lock: threading.Lock
    _handlers: Handlers
    _store: Store
    _wakeup: Wakeup
    _embedded: bool
    _schema_ready: bool

    def _ensure_schema(self) -> None:
        raise NotImplementedError

    def batch_handler(
        self, name: str, *, on_failure: FailureSettings | None = None
    ) -> Callable[[B], B]:
        """Decorator registering ``fn(ctx, items)`` as the batch handler ``name``: this node
        delivers the keys pushed to it (:meth:`push`), each key's pending items in one call,
        in push order.

        A failed delivery (an exception, or ``Result.error``) keeps the items and is retried
        by ``on_failure`` — by default ``GeometricBackoff(1 s, max_delay=5 min)``; settings
        that give up (``NoRetry``, ``max_attempts``) are refused, as they would lose items.

        >>> @scheduler.batch_handler("digest")   # doctest: +SKIP
        ... def digest(ctx: TaskContext, items: list[Any]) -> None:
        ...     send_mail(ctx.name, items)
        """

        def register(fn: B) -> B:
            self._add_batch_handler(name, fn, on_failure)
            return fn

        return register

    def _add_batch_handler(self, name: str, fn: BatchFunction,
                           on_failure: FailureSettings | None, *, internal: bool = False) -> None:
        check_batch_handler_name(name, internal=internal)
        settings = batch_failure(name, on_failure)
        deliver = delivery(self._store, name, fn)
        with self._lock:
            self._handlers.add(name, deliver, settings)
        self._wakeup.set()

    def _add_http_delivery(self, hosts: Sequence[str]) -> tuple[str, ...]:
        """Register the built-in HTTP delivery handler for targets on ``hosts``; returns the
        allow-list's entries."""
        from .http_delivery import HTTP_HANDLER, AllowList, HttpDelivery

        allow = AllowList(hosts)
        self._add_batch_handler(HTTP_HANDLER, HttpDelivery(allow), None, internal=True)
        return allow.hosts

    def _batch_client(self) -> Client:
        if self._embedded and not self._schema_ready:
            self._ensure_schema()
        return self.client

    def push(self, key: str, item: Any, *, handler: str, ontime: Any = None,
             update: str = "always", data: Any = None) -> None:
        """Queue ``item`` (JSON) under ``key`` for the batch handler ``handler``, from any
        process (see :meth:`Client.push`)."""
        self._batch_client().push(key, item, handler=handler, ontime=ontime, update=update,
                                  data=data)
        self._wakeup.set()

    def drop(self, key: str, *, handler: str) -> int:
        """Remove the pending items of ``key``; returns how many (see :meth:`Client.drop`)."""
        return self._batch_client().drop(key, handler=handler)

    def batches(self, handler: str | None = None) -> list[BatchInfo]:
        """The keys with pending items (see :meth:`Client.batches`)."""
        return self._batch_client().batches(handler)
