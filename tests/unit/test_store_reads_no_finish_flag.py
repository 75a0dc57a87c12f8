"""The store's hot path reads no capability flag of the dialect that picks a strategy.

The finish strategy is handed out by the dialect once, when a store is built
(``Dialect.finishing()``, ``dialects/finishing.py``), and where an insert-if-absent runs is
chosen once too (``StoreBase.inserting``, built in ``_store/base.py``); a finish or an insert
that asked the dialect again would let the choice drift apart between modules. Only the
choice's own module may read its flag, and the store names no finish strategy: it asks the
dialect for one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import dbscheduler._store

STORE = Path(dbscheduler._store.__file__).parent
CHOOSERS = {
    "base.py": frozenset({"insert_needs_transaction"}),
}
STRATEGIES = frozenset({"RowByRow", "JoinedChunks", "OneStatement"})
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


def strategy_names(path: Path) -> set[str]:
    """The finish strategies ``path`` names or imports."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Name) and node.id in STRATEGIES:
            found.add(node.id)
        elif isinstance(node, ast.ImportFrom):
            found |= {alias.name for alias in node.names if alias.name in STRATEGIES}
    return found


def test_the_store_names_no_finish_strategy() -> None:
    named = {path.name: sorted(found) for path in sorted(STORE.glob("*.py"))
             if (found := strategy_names(path))}
    assert named == {}
