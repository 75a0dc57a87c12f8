"""The embedded default creates its table through Alembic at start: none of Alembic's INFO
lines may reach the application's logs."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dbscheduler import FixedRate, Scheduler

ROOT = Path(__file__).resolve().parents[2]


def test_start_on_sqlite_logs_nothing_from_alembic(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    scheduler = Scheduler(f"sqlite:///{tmp_path / 'quiet.sqlite3'}")
    scheduler.add("x", lambda: None, schedule=FixedRate(60))
    scheduler.start()
    scheduler.shutdown(timeout=5)
    names = {record.name for record in caplog.records}
    assert not [n for n in names if n.startswith("alembic")], names
    assert "dbscheduler" in names  # INFO lines are captured at all: started, stopped
    assert logging.getLogger("alembic").level == logging.NOTSET  # left as it was


def test_a_fresh_process_prints_no_alembic_line(tmp_path: Path) -> None:
    # Alembic logs its plugins when first imported: only a new interpreter shows them.
    code = textwrap.dedent(f"""
        import logging
        logging.basicConfig(level=logging.INFO, format="%(name)s %(message)s")
        from dbscheduler import FixedRate, Scheduler
        s = Scheduler({f"sqlite:///{tmp_path / 'fresh.sqlite3'}"!r})
        s.add("x", lambda: None, schedule=FixedRate(60))
        s.start()
        s.shutdown(timeout=5)
    """)
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, env={"PYTHONPATH": str(ROOT), "PATH": ""})
    assert proc.returncode == 0, proc.stderr
    assert "] started with 1 task(s)" in proc.stderr
    assert "alembic" not in proc.stderr, proc.stderr
