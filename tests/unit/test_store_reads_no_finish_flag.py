"""The store's hot path reads no capability flag of the dialect that picks a strategy.

The finish strategy is chosen once, when a store is built (``_store/finishing.py``,
:func:`finishing_for`), and so is where an insert-if-absent runs (``StoreBase.inserting``,
built in ``_store/base.py``); a finish or an insert that asked the dialect again would let
the choice drift apart between modules. Only each choice's own module may read its flags.
"""

from __future__ import annotations

import ast
from pathlib import Path

import dbscheduler._store

STORE = Path(dbscheduler._store.__file__).parent
CHOOSERS = {
    "finishing.py": frozenset({"update_from_values", "joined_finish", "joined_max"}),
    "base.py": frozenset({"insert_needs_transaction"}),
}
FLAGS = frozenset().union(*CHOOSERS.values())


def flag_reads(path: Path) -> list[tuple[int, str]]:
    """``(line, flag)`` of every ``dialect.<flag>`` or ``….dialect.<flag>`` in ``path``."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Attribute) and node.attr in FLAGS and (
                (isinstance(node.value, ast.Attribute) and node.value.attr == "dialect")
                or (isinstance(node.value, ast.Name) and node.value.id == "dialect")):
            found.append((node.lineno, node.attr))
    return found


def test_only_the_choosers_read_the_strategy_flags() -> None:
    offenders = {
        path.name: bad
        for path in sorted(STORE.glob("*.py"))
        if (bad := [(line, flag) for line, flag in flag_reads(path)
                    if flag not in CHOOSERS.get(path.name, frozenset())])
    }
    assert offenders == {}


def test_the_choosers_read_them() -> None:
    # Guards the test above against passing because the flags were renamed or moved.
    for name, flags in CHOOSERS.items():
        assert {flag for _, flag in flag_reads(STORE / name)} == flags, name
