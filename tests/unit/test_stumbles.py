"""The newcomer's stumbles that need no database: a misspelled URL scheme, a module that
adds PrometheusMetrics imported twice."""

from __future__ import annotations

import importlib
import sys
import textwrap
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from dbscheduler import Client, Scheduler
from dbscheduler.metrics import PrometheusMetrics

from .test_metrics_listener import FakeClient, _ctx, _outcome


@pytest.mark.parametrize("make", [Scheduler, Client])
def test_a_misspelled_url_scheme_is_named_with_the_nearest_right_one(make: type) -> None:
    with pytest.raises(ValueError) as raised:
        make("postgress://app:secret@db/app")
    message = str(raised.value)
    assert "unknown database 'postgress'" in message
    assert "did you mean 'postgres'" in message
    assert "secret" not in message


def test_an_unknown_driver_is_named() -> None:
    with pytest.raises(ValueError, match="unknown driver 'psycopg3' for postgresql"):
        Scheduler("postgresql+psycopg3://app@db/app")


def test_prometheus_metrics_created_twice_on_one_registry_count_together() -> None:
    registry = CollectorRegistry()
    first = PrometheusMetrics(registry, client=FakeClient())  # type: ignore[arg-type]
    second = PrometheusMetrics(registry, client=FakeClient())  # type: ignore[arg-type]
    first.on_finished(_ctx("a"), _outcome())
    second.on_finished(_ctx("a"), _outcome())
    value = registry.get_sample_value("dbscheduler_executions_total",
                                      {"task": "a", "status": "success"})
    assert value == 2
    assert registry.get_sample_value("dbscheduler_overdue_tasks") == 3
    with pytest.raises(ValueError, match="per_task=True"):
        PrometheusMetrics(registry, per_task=False)


def test_a_module_adding_prometheus_metrics_can_be_imported_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a reload, a test runner or Django's autoreloader does to the user's module."""
    (tmp_path / "metrics_module.py").write_text(textwrap.dedent("""
        from prometheus_client import CollectorRegistry
        from dbscheduler.metrics import PrometheusMetrics
        import builtins
        REGISTRY = getattr(builtins, "_dbscheduler_test_registry", None) or CollectorRegistry()
        builtins._dbscheduler_test_registry = REGISTRY
        metrics = PrometheusMetrics(REGISTRY)
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        module = importlib.import_module("metrics_module")
        importlib.reload(module)
    finally:
        sys.modules.pop("metrics_module", None)
        import builtins
        vars(builtins).pop("_dbscheduler_test_registry", None)
