"""No module of dbscheduler imports, directly or through others, a module that imports it back.

Every import counts: at the top, inside functions and under ``if TYPE_CHECKING:``. A cycle
hidden in a function or a typing block still ties two modules into one idea that cannot be read,
tested or moved apart; ``docs/architecture.md`` says there are none, and this test keeps that true.
"""

from __future__ import annotations

import ast
from pathlib import Path

import dbscheduler

PACKAGE = Path(dbscheduler.__file__).parent
ROOT = "dbscheduler"


def module_names() -> dict[str, Path]:
    """Every module of the package by dotted name; a package is its ``__init__``."""
    names: dict[str, Path] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        if "_migrations" in parts:
            # Alembic's scripts are loaded by path, one at a time, never imported by the library.
            continue
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join([ROOT, *parts])] = path
    return names


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that ``name`` imports, anywhere in its text."""
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                # ``from pkg import mod`` depends on the module; ``from mod import name`` on mod.
                found.add(submodule if submodule in modules else source)
    # Importing ``pkg.mod`` from outside ``pkg`` runs ``pkg/__init__`` first: that is an import of
    # the package too (``web.cli`` importing ``cli.target`` imports ``cli``). The root package is
    # left out: every module is inside it.
    for target in list(found):
        parts = target.split(".")
        for depth in range(2, len(parts)):
            outer = ".".join(parts[:depth])
            if not (name == outer or name.startswith(outer + ".")):
                found.add(outer)
    return {target for target in found if target in modules and target != name}


def import_graph() -> dict[str, set[str]]:
    modules = module_names()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected group of modules (Tarjan), each as a closed path."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [shortest_cycle(graph, group) for group in groups]


def shortest_cycle(graph: dict[str, set[str]], group: list[str]) -> list[str]:
    """The shortest closed path through the group's first module, for the failure's message."""
    members = set(group)
    start = group[0]
    paths: dict[str, list[str]] = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for target in sorted(graph[node] & members):
            if target == start:
                return [*paths[node], start]
            if target not in paths:
                paths[target] = [*paths[node], target]
                queue.append(target)
    raise AssertionError(f"no cycle through {start}")


def test_the_graph_sees_the_package() -> None:
    graph = import_graph()
    # A parser that missed relative, typing-only or function-level imports would find no cycle
    # in anything: check that it sees one import of each kind.
    assert "dbscheduler.errors" in graph["dbscheduler"]
    assert "dbscheduler.client" in graph["dbscheduler"]
    assert len(graph) > 50


def test_finds_a_cycle_through_typing_and_function_imports() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycles(graph) == [["a", "b", "c", "a"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles() -> None:
    cycles = find_cycles(import_graph())
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)
