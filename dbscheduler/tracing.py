"""OpenTelemetry tracing: one span per execution, current while the task function runs.

Needs the ``otel`` extra (``pip install "dbscheduler[otel]"``, the OpenTelemetry API only;
configure an SDK and exporter as usual)::

    from dbscheduler.tracing import OpenTelemetryTracing

    scheduler.add_listener(OpenTelemetryTracing())   # the global tracer provider

Each execution gets a span ``dbscheduler.run <task>`` with the attributes ``dbscheduler.task``,
``dbscheduler.node``, ``dbscheduler.attempt``, ``dbscheduler.token`` (the fencing token, the
row's ``total_attempt``), ``dbscheduler.scheduled_at`` (ISO 8601, database clock) and
``dbscheduler.start_lag_ms``; ``dbscheduler.status`` is added when it ends other than with
success (error, lost, cancelled). A failure sets the
span's status to error and records the exception. Spans the task function opens itself (an
HTTP call, a database query) nest under it, for thread and coroutine tasks alike.

An execution made due by ``trigger()`` called inside a span — in this process or any other
with :func:`link_triggers` on — carries a link to that span, so a trace of "who ran this now"
leads from the request that asked to the run it caused.
"""

from __future__ import annotations

import threading

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, Span, StatusCode, TracerProvider
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from . import __version__
from ._engine import trace_links as _trace_links
from .context import TaskContext
from .listeners import Listener, Outcome

__all__ = ["OpenTelemetryTracing", "link_triggers"]

_FAILED = ("error", "lost")
_PROPAGATOR = TraceContextTextMapPropagator()


def _caller_traceparent() -> str | None:
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)  # nothing when no valid span is current
    return carrier.get("traceparent")


def link_triggers(enabled: bool = True) -> None:
    """Store the current span's context with every ``trigger()`` this process makes, so the
    execution it causes links to it. :class:`OpenTelemetryTracing` turns this on; a process
    that only triggers (a web app, a script) calls it once.

    >>> link_triggers()
    """
    _trace_links.install(_caller_traceparent if enabled else None)


def _link(traceparent: str | None) -> list[Link]:
    if traceparent is None:
        return []
    context = trace.get_current_span(_PROPAGATOR.extract({"traceparent": traceparent}))
    span_context = context.get_span_context()
    return [Link(span_context)] if span_context.is_valid else []


class OpenTelemetryTracing(Listener):
    """A :class:`~dbscheduler.Listener` that traces every execution of this node.

    Args:
        tracer_provider: where spans go; default the global provider
            (``opentelemetry.trace.set_tracer_provider``).
        link_triggers: also turn on :func:`link_triggers` for this process.
    """

    def __init__(self, tracer_provider: TracerProvider | None = None, *,
                 link_triggers: bool = True) -> None:
        if link_triggers:
            _trace_links.install(_caller_traceparent)
        self._tracer = trace.get_tracer("dbscheduler", __version__,
                                        tracer_provider=tracer_provider)
        self._lock = threading.Lock()
        self._spans: dict[tuple[str, int], Span] = {}

    def on_started(self, ctx: TaskContext) -> None:
        lag_ms = max(0.0, (ctx.started_at - ctx.scheduled_at).total_seconds() * 1000)
        span = self._tracer.start_span(
            f"dbscheduler.run {ctx.name}",
            links=_link(ctx.triggered_by),
            attributes={
                "dbscheduler.task": ctx.name,
                "dbscheduler.node": ctx.node_id,
                "dbscheduler.attempt": ctx.attempt,
                # TaskContext carries the fencing token as total_attempt.
                "dbscheduler.token": ctx.total_attempt,
                "dbscheduler.scheduled_at": ctx.scheduled_at.isoformat(),
                "dbscheduler.start_lag_ms": lag_ms,
            },
        )
        with self._lock:
            self._spans[(ctx.name, ctx.total_attempt)] = span
        # The engine calls on_started and the task function in one context of their own per
        # execution, so attaching here makes the span current inside the function, and the
        # context (with it the attachment) is dropped when the execution ends: no detach.
        otel_context.attach(trace.set_span_in_context(span))

    def on_lease_lost(self, ctx: TaskContext) -> None:
        with self._lock:
            span = self._spans.get((ctx.name, ctx.total_attempt))
        if span is not None:
            span.add_event("dbscheduler.lease_lost")

    def on_finished(self, ctx: TaskContext, outcome: Outcome) -> None:
        # Called on the finisher thread: end the span object; the task's context is not
        # current here, so there is nothing to detach.
        with self._lock:
            span = self._spans.pop((ctx.name, ctx.total_attempt), None)
        if span is None:  # refused before it started: no span was opened
            return
        if outcome.status != "success":  # set only when it says something (each costs)
            span.set_attribute("dbscheduler.status", outcome.status)
        if outcome.status in _FAILED:
            span.set_status(StatusCode.ERROR, outcome.error)
            if outcome.exception is not None:
                span.record_exception(outcome.exception)
            elif outcome.error:
                kind, _, message = outcome.error.partition(": ")
                span.add_event("exception", {"exception.type": kind,
                                             "exception.message": message or outcome.error})
        span.end()
