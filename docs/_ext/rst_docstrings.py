"""A griffe extension: the library's docstrings, written for ``help()`` and Sphinx-style
readers, rendered as Markdown by mkdocstrings.

The docstrings use a few reStructuredText habits that Markdown would print literally:

* roles such as ``:class:`~dbscheduler.Client``` become cross-references (autorefs links):
  required ones for the names the package exports (a broken one fails the strict build),
  optional ones for other public names (a link where the reference documents them), plain
  code for private names;
* a paragraph ending in ``::`` followed by an indented block becomes a fenced code block;
* doctest runs (``>>>`` lines and their output) become ``pycon`` code blocks, without the
  ``# doctest:`` directives, which are for the test runner and not for the reader.

Google-style sections (``Args:``) are left to mkdocstrings' own parser.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:class|func|meth|attr|mod|exc|data|obj):`(~?)([^`]+)`")
DOCTEST_DIRECTIVE = re.compile(r"\s*# doctest:.*$")


class RstDocstrings(griffe.Extension):
    """Rewrite every docstring once the object tree is complete (names resolve then)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        self._walk(pkg, seen=set())

    def _walk(self, obj: griffe.Object | griffe.Alias, seen: set[str]) -> None:
        if obj.is_alias or obj.path in seen:
            return
        seen.add(obj.path)
        assert isinstance(obj, griffe.Object)
        if obj.docstring is not None:
            obj.docstring.value = to_markdown(obj.docstring.value, obj)
        for member in obj.members.values():
            self._walk(member, seen)


def to_markdown(text: str, scope: griffe.Object) -> str:
    """The docstring ``text`` of ``scope`` with roles, literal blocks and doctests converted."""
    return _roles(_blocks(text), scope)


def _roles(text: str, scope: griffe.Object) -> str:
    out: list[str] = []
    in_fence = False
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
        out.append(line if in_fence else ROLE.sub(lambda m: _link(m, scope), line))
    return "\n".join(out)


def _link(match: re.Match[str], scope: griffe.Object) -> str:
    short, target = match.group(1) == "~", match.group(2).strip()
    if target.startswith("."):
        target = target[1:]
    shown = target.rsplit(".", 1)[-1] if short else target
    path = _resolve(target, scope)
    if path is None or any(part.startswith("_") for part in path.split(".")):
        return f"`{shown}`"
    top = path.split(".")[1] if path.count(".") else ""
    if top in _exported(scope):
        return f"[`{shown}`][{path}]"  # the reference documents every exported name
    # Other modules' names are linked where the reference documents them, plain otherwise.
    return f'<autoref identifier="{path}" optional><code>{shown}</code></autoref>'


def _exported(scope: griffe.Object) -> set[str]:
    exports = scope.package.exports
    return {str(e) for e in exports} if exports else set()


def _resolve(target: str, scope: griffe.Object) -> str | None:
    """The documented path of ``target`` (a dotted name) seen from ``scope``, or None."""
    if target.startswith("dbscheduler"):
        return _public_path(target, scope)
    head, _, rest = target.partition(".")
    try:
        path = scope.resolve(head)
    except griffe.NameResolutionError:
        return None
    return _public_path(f"{path}.{rest}" if rest else path, scope)


def _public_path(path: str, scope: griffe.Object) -> str | None:
    """Prefer the top-level name (``dbscheduler.Client``) that the reference documents."""
    package = scope.package
    try:
        found = package.get_member(path.split(".", 1)[1]) if "." in path else package
    except (KeyError, ValueError, griffe.AliasResolutionError):
        return None
    canonical = _target(found)
    for name, member in package.members.items():
        try:
            target = _target(member)
        except griffe.AliasResolutionError:
            continue
        if target == canonical and not name.startswith("_"):
            return f"{package.name}.{name}"
        if canonical.startswith(f"{target}.") and not name.startswith("_") and member.is_alias:
            return f"{package.name}.{name}{canonical[len(target):]}"
    return canonical


def _target(obj: griffe.Object | griffe.Alias) -> str:
    """The path of the object itself: an alias's target, or the object's own path."""
    return obj.target_path if isinstance(obj, griffe.Alias) else obj.canonical_path


def _blocks(text: str) -> str:
    """Literal blocks (``::``) and doctest runs as fenced code blocks."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if stripped.startswith(">>>"):
            indent = line[: len(line) - len(line.lstrip())]
            block: list[str] = []
            while i < len(lines) and lines[i].strip():
                block.append(DOCTEST_DIRECTIVE.sub("", lines[i][len(indent):]))
                i += 1
            out += [f"{indent}```pycon", *(f"{indent}{b}" for b in block), f"{indent}```"]
            continue
        if stripped.endswith("::") and _literal_follows(lines, i):
            before = line.rstrip()[:-2].rstrip()
            if before.strip():
                out.append(before + ":")
            i += 1
            while i < len(lines) and not lines[i].strip():
                i += 1
            base = len(line) - len(line.lstrip())
            block = []
            while i < len(lines) and (
                not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > base
            ):
                block.append(lines[i])
                i += 1
            while block and not block[-1].strip():
                block.pop()
            cut = min(len(b) - len(b.lstrip()) for b in block if b.strip())
            code = [b[cut:] for b in block]
            indent = " " * base
            out += ["", f"{indent}```{_language(code)}", *(f"{indent}{c}" for c in code),
                    f"{indent}```", ""]
            continue
        out.append(line)
        i += 1
    return "\n".join(out)


def _literal_follows(lines: list[str], i: int) -> bool:
    base = len(lines[i]) - len(lines[i].lstrip())
    for nxt in lines[i + 1:]:
        if nxt.strip():
            return len(nxt) - len(nxt.lstrip()) > base
    return False


def _language(code: list[str]) -> str:
    first = next((c for c in code if c.strip()), "")
    if first.startswith(("dbscheduler ", "$ ", "pip ", "python -m")):
        return "console" if first.startswith("$ ") else "sh"
    return "python"
