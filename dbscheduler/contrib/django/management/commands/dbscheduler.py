"""``python manage.py dbscheduler <command>``: the ``dbscheduler`` command line on the
project's database (``migrate``, ``run``, ``list``, ``web``, ... — every command)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ..._cli import run_cli


class Command(BaseCommand):  # type: ignore[misc]  # Django ships no types
    help = (
        "The dbscheduler command line on the project's database: `migrate` creates the "
        "table, `run` starts a node with every app's tasks.py, `list`, `show`, `trigger`, "
        "`web`, ... (`manage.py dbscheduler --help` lists them)."
    )
    # The CLI checks what it needs; `--help` and `ddl` must work on a half-configured project.
    requires_system_checks: list[str] = []  # noqa: RUF012 (Django's own attribute)

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("args", nargs=argparse.REMAINDER,
                            help="a dbscheduler command and its arguments")

    def run_from_argv(self, argv: list[str]) -> None:
        # Every argument after the command name is the CLI's, `--help` and `--url` included:
        # Django's own parser would take them.
        code = run_cli(argv[2:], prog_name=f"{argv[0].rsplit('/', 1)[-1]} {argv[1]}")
        sys.exit(code)

    def handle(self, *args: str, **options: Any) -> None:
        code = run_cli(list(args), prog_name="manage.py dbscheduler")
        if code:
            raise CommandError(f"dbscheduler {' '.join(args)} exited {code}", returncode=code)
