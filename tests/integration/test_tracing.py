"""OpenTelemetryTracing on a running node and a real database, captured with the SDK's
in-memory exporter: one span per execution, its attributes, the task's own spans nested
under it (thread and coroutine tasks), and failures recorded."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from dbscheduler import FixedDelay, Scheduler, TaskContext
from dbscheduler.tracing import OpenTelemetryTracing
from tests.helpers import running, wait_until


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def spans() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def test_one_span_per_execution_with_nesting_and_errors(
    migrated: tuple[str, str], spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    url, table = migrated
    provider, exporter = spans
    tracer = provider.get_tracer("the-tasks")
    lock = threading.Lock()
    calls: dict[str, list[int]] = {"sync": [], "async": [], "fails": []}

    def record(ctx: TaskContext) -> None:
        with lock:
            calls[ctx.name].append(ctx.total_attempt)

    s = Scheduler(url, table=table, poll_interval=0.2, lease=6, max_workers=4, node_id="n-1")

    @s.task("sync", schedule=FixedDelay(0.05))
    def sync(ctx: TaskContext) -> None:
        with tracer.start_as_current_span("sync-child"):
            record(ctx)

    @s.task("async", schedule=FixedDelay(0.05))
    async def coro(ctx: TaskContext) -> None:
        await asyncio.sleep(0)
        with tracer.start_as_current_span("async-child"):
            await asyncio.sleep(0.001)
            record(ctx)

    @s.task("fails", schedule=FixedDelay(0.05))
    def fails(ctx: TaskContext) -> None:
        record(ctx)
        raise LookupError("no such order")

    s.add_listener(OpenTelemetryTracing(tracer_provider=provider))
    with running(s):
        wait_until(lambda: all(len(v) >= 5 for v in calls.values()), timeout=60,
                   what="5 executions of each task")
    finished = exporter.get_finished_spans()
    runs = {name: [sp for sp in finished if sp.name == f"dbscheduler.run {name}"]
            for name in calls}
    for name, tokens in calls.items():
        assert sorted(int(_attr(sp, "dbscheduler.token")) for sp in runs[name]) == sorted(tokens)
    for sp in runs["sync"] + runs["async"] + runs["fails"]:
        attrs = sp.attributes or {}
        assert attrs["dbscheduler.node"] == "n-1"
        assert attrs["dbscheduler.task"] == sp.name.removeprefix("dbscheduler.run ")
        assert isinstance(attrs["dbscheduler.attempt"], int) and attrs["dbscheduler.attempt"] >= 1
        assert isinstance(attrs["dbscheduler.scheduled_at"], str)
        assert float(attrs["dbscheduler.start_lag_ms"]) >= 0  # type: ignore[arg-type]
        assert sp.parent is None  # a root: nothing leaks from one execution to the next
    # The task's own spans are children of their execution's span, and of no other.
    for child_name, run_name in (("sync-child", "sync"), ("async-child", "async")):
        children = [sp for sp in finished if sp.name == child_name]
        assert len(children) == len(calls[run_name])
        by_id = {sp.get_span_context().span_id: sp  # type: ignore[union-attr]
                 for sp in runs[run_name]}
        assert {c.parent.span_id for c in children} == set(by_id)  # type: ignore[union-attr]
        assert all(c.context.trace_id == by_id[c.parent.span_id].context.trace_id  # type: ignore[union-attr]
                   for c in children)
    for sp in runs["sync"] + runs["async"]:
        assert sp.status.status_code is StatusCode.UNSET
    for sp in runs["fails"]:
        assert sp.status.status_code is StatusCode.ERROR
        assert sp.status.description == "LookupError: no such order"
        (event,) = [e for e in sp.events if e.name == "exception"]
        assert event.attributes is not None
        assert event.attributes["exception.type"] == "LookupError"
        assert "no such order" in str(event.attributes["exception.stacktrace"])
    # Nothing stays current on the test's thread either.
    assert not trace.get_current_span().get_span_context().is_valid


def _attr(span: ReadableSpan, key: str) -> Any:
    return (span.attributes or {})[key]
