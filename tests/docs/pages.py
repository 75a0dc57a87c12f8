"""The runnable content of a documentation page, in page order.

A page's steps run in one Python namespace, top to bottom, as a reader would type them:

* ```` ```python ```` blocks are executed; with ``title="app.py"`` the block is written to that
  file instead (the working directory is on ``sys.path``, so later steps can import it and
  shell commands can run it);
* ```` ```pycon ```` blocks (``>>>`` sessions) are run as doctests: their output must match;
* ```` ```sh ```` and ```` ```console ```` blocks: their ``dbscheduler`` and ``python``
  command lines are run (in a console block, the lines starting with ``$``); ``$ echo $?``
  followed by a number is the exit code the previous command must give (0 otherwise); in a
  console block, the lines shown after a command are its output, compared with what it
  printed up to what changes between runs (times, counts, node ids, a live task's state:
  ``run_page.normalized``; ``...`` stands for any lines), so that no shown output goes stale;
  installation lines and other programs are listed in ``NOT_RUN`` and skipped; any other
  command is an error, so that nothing is shown that no test runs;
* an HTML comment ``<!-- test`` … ``-->`` holds hidden Python run at that point: set-up a
  reader does not need to see (a stand-in for their own function) and checks of what the
  example did;
* ``<!-- test-shell: ready=started_with interrupt=4 -->`` before a shell block sends Ctrl-C
  (SIGINT) to each of its commands 4 seconds after it printed "started with" (``_`` stands
  for a space; without ``ready``, 4 seconds after it started), for commands that run until
  stopped; they must then exit as the page says (0 unless ``echo $?`` says otherwise); their
  shown output is compared line by line in any order (threads write it), as is that of a
  block marked ``<!-- test-shell: output=lines -->``.

Server URLs in examples are placeholders (``PLACEHOLDERS``) that the test replaces with a
fresh database on the test server.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"

PLACEHOLDERS = {
    "postgresql": "postgresql+psycopg://app@db/app",
    "mysql": "mysql+pymysql://app@db/app",
}

UNREACHABLE = "postgresql+psycopg://app@127.0.0.1:1/app"
"""A server URL examples may use to show what happens when the database does not answer."""

NOT_RUN = (
    "pip ", "python3 -m venv", "python -m venv", ".venv/bin/pip", "alembic ", "uvicorn ",
    "gunicorn ", "flask ", "docker ", "kubectl ", "curl ", "cd ", "bash examples/",
    ".venv/bin/python -m bench", "python -m bench", ".venv/bin/python -m pytest",
    "python -m pytest", "DBSCHEDULER_TEST_", "kill ", ". .venv/bin/activate", "source ",
    "python manage.py ",
)
"""Shell lines shown but not run: installing, other programs, and the benchmark and test
suites (which have their own tests); a Django project's ``manage.py`` (tests/django runs one)."""

FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<lang>[\w+-]*)(?P<attrs>.*)$")
TITLE = re.compile(r'title="(?P<title>[^"]+)"')
LANGS = {"python": "python", "py": "python", "pycon": "pycon", "sh": "shell", "bash": "shell",
         "console": "console"}


@dataclass
class Step:
    kind: str
    """``python``, ``file``, ``pycon``, ``shell``, ``console`` or ``hidden``."""
    code: str
    line: int
    """The page line of the step's first line of code (1-based)."""
    title: str | None = None
    options: dict[str, str] = field(default_factory=dict)


def steps(page: Path) -> list[Step]:
    """Every runnable step of ``page``, in order."""
    lines = page.read_text().split("\n")
    out: list[Step] = []
    options: dict[str, str] = {}
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.strip().startswith("<!-- test-shell:"):
            body = line.strip()[len("<!-- test-shell:"):].removesuffix("-->")
            options = dict(part.split("=", 1) for part in body.split())
            i += 1
            continue
        if line.strip() == "<!-- test":
            end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "-->")
            out.append(Step("hidden", textwrap.dedent("\n".join(lines[i + 1:end])), i + 2))
            i = end + 1
            continue
        match = FENCE.match(line)
        if not match:
            i += 1
            continue
        indent, fence = match["indent"], match["fence"]
        end = next(j for j in range(i + 1, len(lines))
                   if lines[j].strip() == fence and lines[j].startswith(indent))
        body = textwrap.dedent("\n".join(lines[i + 1:end]))
        kind = LANGS.get(match["lang"])
        if kind is not None:
            title = TITLE.search(match["attrs"])
            if kind == "python" and title:
                out.append(Step("file", body, i + 2, title["title"]))
            else:
                out.append(Step(kind, body, i + 2, options=options))
        options = {}
        i = end + 1
    return out


def pages_with_steps() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if "_ext" not in p.parts and steps(p))


def backends(page: Path) -> list[str]:
    """The server databases a page's examples use (by their placeholder URLs)."""
    code = "\n".join(step.code for step in steps(page))
    return [name for name, url in PLACEHOLDERS.items() if url in code]
