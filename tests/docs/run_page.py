"""Run the examples of one documentation page: ``python -m tests.docs.run_page PAGE``.

Started by ``tests/docs/test_examples.py`` in a fresh working directory, with
``DOCS_URLS`` (a JSON object: placeholder URL -> the test database's URL). Exits 0 when every
step ran as the page says; otherwise prints the failing step's page and line and exits 1.
"""

from __future__ import annotations

import doctest
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from tests.docs.pages import NOT_RUN, PLACEHOLDERS, Step, steps

SERVER_URL = re.compile(r"\b(?:postgres(?:ql)?|mysql|mariadb|mssql|oracle)[\w+]*://[^\s\"'`]+")


class StepFailed(Exception):
    pass


class Page:
    def __init__(self, path: Path, urls: dict[str, str]) -> None:
        self.path = path
        self.urls = urls
        self.namespace: dict[str, Any] = {"__name__": "__main__"}
        self.env = dict(os.environ)
        self.background: list[tuple[str, subprocess.Popen[bytes]]] = []
        # Hidden steps reach the commands started with `&` (to kill one, say) by this name.
        self.namespace["__background__"] = self.background

    def rewrite(self, code: str, step: Step) -> str:
        for placeholder, url in self.urls.items():
            code = code.replace(placeholder, url)
        for found in SERVER_URL.findall(code):
            found = found.rstrip(".,:;)")
            if found not in self.urls.values() and found not in PLACEHOLDERS.values():
                raise StepFailed(f"{found!r} is not a placeholder URL of tests/docs/pages.py: "
                                 "examples must use those, so that they run on the test servers")
        return code

    def run(self, step: Step) -> None:
        code = self.rewrite(step.code, step)
        if step.kind in ("python", "hidden"):
            # Padding puts tracebacks at the page's own line numbers.
            exec(compile("\n" * (step.line - 1) + code, str(self.path), "exec"), self.namespace)
        elif step.kind == "file":
            assert step.title is not None
            Path(step.title).write_text(code)
        elif step.kind == "pycon":
            self.doctest(code, step)
        else:
            self.shell(code, step)

    def doctest(self, code: str, step: Step) -> None:
        test = doctest.DocTestParser().get_doctest(code, self.namespace, self.path.name,
                                                   str(self.path), step.line - 1)
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
        runner.run(test, clear_globs=False)
        self.namespace.update(test.globs)  # a DocTest works on a copy: keep what it defined
        if runner.failures:
            raise StepFailed(f"{runner.failures} doctest example(s) failed (output above)")

    def shell(self, code: str, step: Step) -> None:
        commands: list[tuple[str, int]] = []  # (command, expected exit code)
        lines = code.replace("\\\n", " ").split("\n")
        for n, line in enumerate(lines):
            if step.kind == "console":
                if not line.startswith("$ "):
                    continue
                line = line[2:]
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if line == "echo $?":
                status = int(lines[n + 1].strip())
                commands[-1] = (commands[-1][0], status)
                continue
            commands.append((line, 0))
        interrupt = float(step.options["interrupt"]) if "interrupt" in step.options else None
        for command, status in commands:
            self.command(command, status, interrupt)

    def command(self, command: str, status: int, interrupt: float | None) -> None:
        if command.startswith(NOT_RUN):
            return
        words = shlex.split(command)
        if words[0] == "export":
            name, _, value = words[1].partition("=")
            self.env[name] = value
            return
        env = dict(self.env)
        while "=" in words[0] and not words[0].startswith("-"):
            name, _, value = words.pop(0).partition("=")
            env[name] = value
        background = words[-1] == "&"
        if background:
            words.pop()
        stdout = None
        if len(words) > 2 and words[-2] in (">", "2>"):
            stdout = open(words[-1], "wb")  # noqa: SIM115 (closed with the process)
            words = words[:-2]
        if words[0] == "dbscheduler" and not background and interrupt is None and stdout is None:
            self.in_process(command, words[1:], env, status)
            return
        if words[0] == "dbscheduler":
            argv = [sys.executable, "-m", "dbscheduler", *words[1:]]
        elif words[0] in ("python", "python3"):
            argv = [sys.executable, *words[1:]]
        else:
            raise StepFailed(f"the docs show {command!r}, which no test runs: run it (a "
                             "dbscheduler or python command) or list it in NOT_RUN")
        print(f"$ {command}", file=sys.stderr, flush=True)
        proc = subprocess.Popen(argv, env=env, stdout=stdout or subprocess.PIPE,
                                stderr=subprocess.STDOUT,
                                start_new_session=True)
        if background:
            self.background.append((command, proc))
            return
        if interrupt is not None:
            try:
                proc.wait(timeout=interrupt)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise StepFailed(f"{command!r} did not end within 60 s") from None
        sys.stderr.write((out or b"").decode(errors="replace"))
        if proc.returncode != status:
            raise StepFailed(f"{command!r} exited {proc.returncode}, the page says {status}")

    def in_process(self, command: str, args: list[str], env: dict[str, str], status: int) -> None:
        """A short ``dbscheduler`` command, run in this process: the same program without
        the second it takes a new interpreter to import it."""
        from click.testing import CliRunner

        from dbscheduler.cli import cli

        print(f"$ {command}", file=sys.stderr, flush=True)
        result = CliRunner().invoke(cli, args, env=env, prog_name="dbscheduler")
        sys.stderr.write(result.output)
        if result.exit_code != status:
            raise StepFailed(f"{command!r} exited {result.exit_code}, the page says {status}"
                             + (f"\n{result.exception!r}" if result.exception else ""))

    def stop_background(self) -> None:
        for command, proc in self.background:
            if proc.poll() is not None:
                continue  # ended already (a hidden step killed it): the page said so
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                raise StepFailed(f"{command!r} did not stop within 30 s of Ctrl-C") from None
            if proc.returncode != 0:
                raise StepFailed(f"{command!r} exited {proc.returncode} after Ctrl-C")

    def stop_schedulers(self) -> None:
        from dbscheduler import Scheduler

        for value in self.namespace.values():
            if isinstance(value, Scheduler):
                value.shutdown(timeout=5)


def main() -> int:
    path = Path(sys.argv[1])
    sys.path.insert(0, os.getcwd())
    page = Page(path, json.loads(os.environ.get("DOCS_URLS", "{}")))
    current: Step | None = None
    try:
        for current in steps(path):
            started = time.monotonic()
            page.run(current)
            print(f"-- {path.name}:{current.line} {current.kind} "
                  f"{time.monotonic() - started:.2f}s", file=sys.stderr, flush=True)
        current = None
        page.stop_background()
    except BaseException as exc:
        where = f"{path}:{current.line} ({current.kind} block)" if current else str(path)
        if isinstance(exc, StepFailed):
            print(f"FAILED at {where}: {exc}", file=sys.stderr)
        else:
            print(f"FAILED at {where}:", file=sys.stderr)
            traceback.print_exc()
        for _, proc in page.background:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        sys.stderr.flush()
        os._exit(1)
    finally:
        page.stop_schedulers()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # a thread an example left running must not keep the page's process alive


if __name__ == "__main__":
    main()
