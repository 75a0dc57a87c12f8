"""Schemathesis against ``/api/openapi.json``: generated requests to every route never get a
5xx, and every response matches the document (status code, content type, body schema).

Bounded and deterministic (a fixed number of examples, derandomized) so it stays short."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from dbscheduler import FixedRate, Scheduler
from dbscheduler.web import create_app
from tests.web.conftest import ODD_NAMES

EXAMPLES = 12
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance]


@pytest.fixture
def backend() -> str:
    return "sqlite"


@pytest.fixture
def web_schema(migrated: tuple[str, str]) -> Iterator[schemathesis.BaseSchema]:
    url, table = migrated
    scheduler = Scheduler(url, table=table)
    for name in ("alpha", "beta", *ODD_NAMES):
        scheduler.add(name, lambda ctx: None, schedule=FixedRate(3600))
    scheduler.start()
    scheduler.shutdown(timeout=1)
    yield schemathesis.openapi.from_asgi("/api/openapi.json", create_app(url, table=table))
    scheduler.engine.dispose()


ROUTES = {
    ("/api/tasks", "get"), ("/api/tasks", "put"), ("/api/tasks/pause", "post"),
    ("/api/tasks/resume", "post"),
    ("/api/tasks/trigger", "post"), ("/api/tasks/{name}/upcoming", "get"),
    ("/api/tasks/{name}/trigger", "post"), ("/api/tasks/{name}/pause", "post"),
    ("/api/tasks/{name}/resume", "post"), ("/api/tasks/{name}/cancel", "post"),
    ("/api/tasks/{name}/reschedule", "post"), ("/api/tasks/{name}", "get"),
    ("/api/tasks/{name}", "put"), ("/api/tasks/{name}", "delete"), ("/api/health", "get"),
    ("/api/runs", "get"), ("/api/tasks/{name}/runs", "get"),
    ("/api/batches", "get"), ("/api/batches/drop", "post"),
    ("/api/nodes", "get"), ("/api/groups", "get"), ("/api/schedules/preview", "get"),
    ("/v3/queue/{merge_key}/{method}/{service}", "post"),
    ("/v3/queue/{merge_key}/{method}/{service}", "delete"),
}
"""Every route the document must list (``/metrics`` is outside ``/api``)."""


@pytest.mark.slow
def test_every_route_answers_within_its_documented_schema(
    web_schema: schemathesis.BaseSchema,
) -> None:
    # Driven by hand rather than with schemathesis' pytest plugin: one test, every operation,
    # a fixed budget of examples each.
    operations = [result.ok() for result in web_schema.get_all_operations()]
    assert len(operations) == len(ROUTES)
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        def check(case: schemathesis.Case) -> None:
            case.call_and_validate(checks=CHECKS)

        check()


def test_the_document_lists_every_route_with_request_and_response_schemas(
    web_schema: schemathesis.BaseSchema,
) -> None:
    raw = web_schema.raw_schema
    routes = {(path, method) for path, ops in raw["paths"].items() for method in ops}
    assert routes == ROUTES
    for path, ops in raw["paths"].items():
        for method, op in ops.items():
            ok = op["responses"]["200"]["content"]["application/json"]["schema"]
            assert "$ref" in ok, (path, method)
            for code in ("401", "403", "422", "500", "503"):
                assert code in op["responses"], (path, method, code)
    for model in ("RescheduleBody", "BulkBody", "ScheduleBody", "ApiError", "Task", "Run",
                  "RunList", "Batch", "BatchList", "Pushed", "Dropped", "DropBody", "NodeList",
                  "GroupList", "ScheduledTask"):
        assert model in raw["components"]["schemas"]


def test_the_task_schema_names_every_task_info_field() -> None:
    import dataclasses

    from dbscheduler import RunInfo, TaskInfo
    from dbscheduler.web.models import Run, Task

    assert set(Task.model_fields) == {f.name for f in dataclasses.fields(TaskInfo)} | {
        "running", "builtin"}
    assert set(Run.model_fields) == {f.name for f in dataclasses.fields(RunInfo)} | {"duration"}


def test_the_batch_schema_names_every_batch_info_field() -> None:
    import dataclasses

    from dbscheduler.batches import BatchInfo
    from dbscheduler.web.queue import Batch

    assert set(Batch.model_fields) == {f.name for f in dataclasses.fields(BatchInfo)}
