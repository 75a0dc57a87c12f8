"""The store's hot path reads no finish capability flag of the dialect.

The finish strategy is chosen once, when a store is built (``_store/finishing.py``,
:func:`finishing_for`); a finish that asked the dialect again would let the choice drift
apart between modules. Only that chooser may read these flags.
"""

from __future__ import annotations

import ast
from pathlib import Path

import dbscheduler._store

STORE = Path(dbscheduler._store.__file__).parent
FLAGS = frozenset({"update_from_values", "joined_finish", "joined_max"})
CHOOSER = "finishing.py"


def flag_reads(path: Path) -> list[tuple[int, str]]:
    """``(line, flag)`` of every ``dialect.<flag>`` or ``….dialect.<flag>`` in ``path``."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Attribute) and node.attr in FLAGS and (
                (isinstance(node.value, ast.Attribute) and node.value.attr == "dialect")
                or (isinstance(node.value, ast.Name) and node.value.id == "dialect")):
            found.append((node.lineno, node.attr))
    return found


def test_only_the_chooser_reads_the_finish_flags() -> None:
    offenders = {
        path.name: reads
        for path in sorted(STORE.glob("*.py"))
        if path.name != CHOOSER and (reads := flag_reads(path))
    }
    assert offenders == {}


def test_the_chooser_reads_them() -> None:
    # Guards the test above against passing because the flags were renamed.
    assert {flag for _, flag in flag_reads(STORE / CHOOSER)} == FLAGS
