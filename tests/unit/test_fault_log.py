"""A recurring fault is one WARNING line (its traceback only at DEBUG), then one recovery line."""

from __future__ import annotations

import logging

import pytest

from dbscheduler._engine.faults import FaultLog


def test_a_fault_is_one_warning_line_and_its_traceback_only_at_debug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = logging.getLogger("dbscheduler.test-faults")
    faults = FaultLog(log, "polling")
    caplog.set_level(logging.INFO, logger="dbscheduler.test-faults")
    for _ in range(50):
        try:
            raise ConnectionError("server closed the connection unexpectedly\nmore detail")
        except ConnectionError as exc:
            faults.failed(exc)
    faults.ok()
    lines = [(r.levelname, r.getMessage(), r.exc_info is not None) for r in caplog.records]
    assert lines == [
        ("WARNING", "polling failed: ConnectionError: server closed the connection "
                    "unexpectedly (retrying)", False),
        ("INFO", "polling recovered after 50 failure(s)", False),
    ]
    caplog.clear()
    caplog.set_level(logging.DEBUG, logger="dbscheduler.test-faults")
    try:
        raise ConnectionError("again")
    except ConnectionError as exc:
        faults.failed(exc)
    assert any(r.levelname == "DEBUG" and r.exc_info for r in caplog.records)
