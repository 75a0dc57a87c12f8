"""SQL Server ≥ 2017 (pyodbc): locking hints ``UPDLOCK, READPAST, ROWLOCK`` skip rows others hold.

Timestamps are ``DATETIME2(6)`` holding UTC, compared against ``SYSUTCDATETIME()``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ColumnElement

from .base import Dialect, db_now, db_now_plus


@compiles(db_now, "mssql")
def _now(element: db_now, compiler: SQLCompiler, **kw: Any) -> str:
    return "SYSUTCDATETIME()"


@compiles(db_now_plus, "mssql")
def _now_plus(element: db_now_plus, compiler: SQLCompiler, **kw: Any) -> str:
    # DATEADD takes an int: whole seconds and the microsecond rest separately, so leases of
    # more than 35 minutes do not overflow a microsecond count.
    (seconds,) = element.clauses
    s = compiler.process(seconds, **kw)
    whole = f"CAST(FLOOR({s}) AS INT)"
    rest = f"CAST(ROUND(({s} - FLOOR({s})) * 1000000, 0) AS INT)"
    return f"DATEADD(microsecond, {rest}, DATEADD(second, {whole}, SYSUTCDATETIME()))"


class MSSQLDialect(Dialect):
    name = "mssql"

    def names_in(self, column: ColumnElement[str], names: Sequence[str]) -> ColumnElement[bool]:
        # SQL Server allows 2,100 parameters per statement: ship the names as one JSON text.
        values = sa.text(
            "SELECT value COLLATE Latin1_General_100_BIN2 AS value FROM OPENJSON(:names)"
        ).bindparams(sa.bindparam("names", json.dumps(list(names)), type_=sa.UnicodeText()))
        return column.in_(values.columns(sa.column("value", sa.Unicode())))
