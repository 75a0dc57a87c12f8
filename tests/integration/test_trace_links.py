"""An execution made due by ``trigger()`` inside a span links its own span to that one; the
executions after it, and one whose due time a reschedule replaced, do not."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from dbscheduler import Client, Cron, Scheduler
from dbscheduler.tracing import OpenTelemetryTracing, link_triggers
from tests.helpers import running, wait_until


@pytest.fixture
def spans() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()
    link_triggers(False)


def test_a_triggered_run_links_to_the_span_that_triggered_it(
    migrated: tuple[str, str], spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    url, table = migrated
    provider, exporter = spans
    tracer = provider.get_tracer("the-web-app")
    node = Scheduler(url, table=table, poll_interval=0.2, node_id="n-1")
    node.add("report", lambda: None, schedule=Cron("0 0 1 1 *"))  # never due by itself
    node.add_listener(OpenTelemetryTracing(tracer_provider=provider))

    def runs() -> list[ReadableSpan]:
        return [s for s in exporter.get_finished_spans() if s.name == "dbscheduler.run report"]

    with running(node), Client(url, table=table) as client:
        # Another process, as a web app would be: it turns links on and triggers in a span.
        link_triggers()
        with tracer.start_as_current_span("POST /reports/run") as request:
            client.trigger("report")
        wait_until(lambda: len(runs()) == 1, timeout=10, what="the triggered run")
        (linked,) = runs()[0].links
        assert linked.context.trace_id == request.get_span_context().trace_id
        assert linked.context.span_id == request.get_span_context().span_id
        assert runs()[0].context.trace_id != request.get_span_context().trace_id  # a link

        client.trigger("report")  # outside any span: no link, and the old one is not reused
        wait_until(lambda: len(runs()) == 2, timeout=10, what="the second run")
        assert list(runs()[1].links) == []

        node.pause("report")
        with tracer.start_as_current_span("POST /reports/run"):
            client.trigger("report")
        client.reschedule("report", client.db_now())  # a new due time: the link goes
        node.resume("report")
        wait_until(lambda: len(runs()) == 3, timeout=10, what="the rescheduled run")
        assert list(runs()[2].links) == []
