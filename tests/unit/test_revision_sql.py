"""Each migration's SQL on every dialect, SQL Server and Oracle included, is the SQL it was
written with.

``dbscheduler ddl`` renders the migrations offline; the part of each revision (from its
``-- Running upgrade`` line to the next) is compared with ``schema_snapshots/<dialect>.json``.
``ddl/*.sql`` is regenerated whole by ``dbscheduler ddl --write ddl``, so it cannot tell an
old revision that changed from a new one; these snapshots only grow. The real databases'
reflected shapes are ``tests/integration/test_schema_snapshots.py``.

A new revision's parts are added by::

    DBSCHEDULER_WRITE_SNAPSHOTS=1 python -m pytest tests/unit/test_revision_sql.py -n 0

which never rewrites a revision already there.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from dbscheduler.migrate import offline_sql
from dbscheduler.table import REVISION

SNAPSHOTS = Path(__file__).resolve().parent / "schema_snapshots"
DIALECTS = ("sqlite", "postgresql", "mysql", "mssql", "oracle")
WRITE = os.environ.get("DBSCHEDULER_WRITE_SNAPSHOTS") == "1"
_HEADER = re.compile(r"^-- Running upgrade \S* ?-> dbscheduler_(\d{4})$", re.M)
_COMMIT = re.compile(r"\n\s*COMMIT;?\s*(\n\s*(/|GO)\s*)?$")
"""The script's end, after the newest revision's part (``/`` on Oracle, ``GO`` on SQL
Server): not the revision's, and gone from its part once another revision follows."""


def revision_parts(sql: str) -> dict[str, str]:
    """Each revision's part of an offline script, by revision number (``"0001"`` …)."""
    heads = list(_HEADER.finditer(sql))
    return {m.group(1): _COMMIT.sub("", sql[m.start():heads[i + 1].start()
                                             if i + 1 < len(heads) else None].rstrip()).rstrip()
            for i, m in enumerate(heads)}


@pytest.mark.parametrize("dialect", DIALECTS)
def test_each_revision_renders_its_snapshot(dialect: str) -> None:
    parts = revision_parts(offline_sql(dialect))
    assert list(parts) == [f"{n:04d}" for n in range(1, REVISION + 1)]
    path = SNAPSHOTS / f"{dialect}.json"
    kept: dict[str, str] = json.loads(path.read_text()) if path.exists() else {}
    if WRITE and any(n not in kept for n in parts):
        kept.update({n: sql for n, sql in parts.items() if n not in kept})
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(kept, indent=1, ensure_ascii=False) + "\n")
    missing = [n for n in parts if n not in kept]
    assert not missing, (
        f"no snapshot of revision(s) {', '.join(missing)} on {dialect}: add it with "
        "DBSCHEDULER_WRITE_SNAPSHOTS=1 python -m pytest tests/unit/test_revision_sql.py -n 0")
    for number, sql in parts.items():
        assert sql == kept[number], (
            f"revision {number} no longer renders on {dialect} the SQL it was written with: a "
            "change to today's table definition reached an old revision; put it behind a new "
            "revision instead")
    assert sorted(kept) == list(parts), f"snapshots without a revision in {path}"
