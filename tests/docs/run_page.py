"""Run the examples of documentation pages: ``python -m tests.docs.run_page JOBS RESULTS``.

Started by ``tests/docs/test_examples.py``. Each page runs in a process of its own, forked
from this one once the library is imported, in an empty working directory, with its server
placeholders mapped to the test databases; its output says which step failed, at which line
of the page.
"""

from __future__ import annotations

import doctest
import importlib
import json
import os
import re
import runpy
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any, BinaryIO

from tests.docs.pages import NOT_RUN, PLACEHOLDERS, UNREACHABLE, Step, steps

PARALLEL = 4
PAGE_TIMEOUT = 120.0
SERVER_URL = re.compile(r"\b(?:postgres(?:ql)?|mysql|mariadb|mssql|oracle)[\w+]*://[^\s\"'`]+")


class StepFailed(Exception):
    pass


# What differs between two runs of the same example, and is not what the page shows it for:
# instants, durations and relative times, counts and numbered names (web-1). Numbers inside
# identifiers (dbscheduler_0007) are kept: a stale revision is what the check is for.
_INSTANT = re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:\d\d| UTC)?")
# A duration in words may have one part or several ("in 28d", "in 32d 14h", "2m 4s ago"),
# depending on the instant the page runs.
_SPAN = r"N(?:\.N)?\s?(?:ms|s|m|h|d)(?:\s?N(?:\.N)?\s?(?:ms|s|m|h|d))*"
_RELATIVE = re.compile(rf"\b(?:now|in ~?{_SPAN}|{_SPAN} ago)\b")
_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?")
_RULE = re.compile(r"[─━-]{3,}")
# A task's last and next run in a listing: which state a live task is in at the instant of
# the command is the machine's timing, not what the page shows.
_RUNNING_ON = re.compile(r"\b(no|yes) \S+$")  # the last column of `list`: a node, or -
_WHEN = re.compile(r"(?:(?:success|error|lost|cancelled|timeout|skipped) <rel>|never ran|"
                   r"running, started <rel>|after the current run|<time> \(<rel>\))")


_NODE = re.compile(r"\b[\w.-]+-\d+-[0-9a-f]{4}\b")  # a default node id: host-pid-suffix


def normalized(line: str) -> str:
    line = line.removeprefix("^C")  # the terminal's echo of Ctrl-C
    line = _NODE.sub("<node>", line)
    line = _INSTANT.sub("<time>", line)
    line = _NUMBER.sub("N", line)
    line = _RELATIVE.sub("<rel>", line)
    line = _WHEN.sub("<when>", line)
    line = _RULE.sub("───", line)
    return _RUNNING_ON.sub(r"\1 <on>", " ".join(line.split()))


def matches(shown: list[str], actual: list[str]) -> bool:
    """Whether ``actual`` lines are the ``shown`` ones (each :func:`normalized`; a shown line
    ``...`` matches any number of lines)."""
    if not shown:
        return not actual
    if shown[0].strip() == "...":
        return any(matches(shown[1:], actual[i:]) for i in range(len(actual) + 1))
    return bool(actual) and normalized(shown[0]) == normalized(actual[0]) \
        and matches(shown[1:], actual[1:])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Forked:
    """A command run in a child forked from this process instead of a new interpreter: the
    same program, without importing the library again. ``args`` is what follows the
    interpreter on its command line: ``-m dbscheduler ARGS`` or ``SCRIPT ARGS``; the child is
    the leader of a session of its own, like ``Popen(start_new_session=True)``."""

    def __init__(self, args: list[str], env: dict[str, str], stdout: BinaryIO | None) -> None:
        read, write = os.pipe() if stdout is None else (-1, stdout.fileno())
        sys.stdout.flush()
        sys.stderr.flush()
        self.pid = os.fork()
        if self.pid == 0:
            code = 1
            try:
                os.setsid()
                os.dup2(write, 1)
                os.dup2(write, 2)
                os.environ.clear()
                os.environ.update(env)
                code = self._main(args)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        self.returncode: int | None = None
        self.stdout: BinaryIO | None = None
        if read != -1:
            os.close(write)
            self.stdout = os.fdopen(read, "rb")

    @staticmethod
    def _main(args: list[str]) -> int:
        if args[:2] == ["-m", "dbscheduler"]:
            from dbscheduler.cli import main

            sys.argv = ["dbscheduler", *args[2:]]
            main(args[2:])
            return 0
        sys.argv = list(args)
        runpy.run_path(args[0], run_name="__main__")
        return 0

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0)
            time.sleep(0.02)
        return code


class Page:
    def __init__(self, path: Path, urls: dict[str, str]) -> None:
        self.path = path
        self.urls = urls
        self.namespace: dict[str, Any] = {"__name__": "__main__"}
        self.env = dict(os.environ)
        self.background: list[tuple[str, subprocess.Popen[bytes] | Forked]] = []
        # Hidden steps reach the commands started with `&` (to kill one, say) by this name.
        self.namespace["__background__"] = self.background

    def rewrite(self, code: str, step: Step) -> str:
        for placeholder, url in self.urls.items():
            code = code.replace(placeholder, url)
        if "--port 8080" in code:  # a server a page starts must not need a port in use
            code = code.replace("--port 8080", f"--port {free_port()}")
        for found in SERVER_URL.findall(code):
            found = found.rstrip(".,:;)")
            if found not in (*self.urls.values(), *PLACEHOLDERS.values(), UNREACHABLE):
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
            Path(step.title).parent.mkdir(parents=True, exist_ok=True)
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
        commands: list[tuple[str, int, list[str]]] = []  # (command, exit code, shown output)
        lines = code.replace("\\\n", " ").split("\n")
        skip = False
        for n, line in enumerate(lines):
            if skip:  # the exit code after `echo $?`
                skip = False
                continue
            if step.kind == "console":
                if not line.startswith("$ "):
                    if commands and line.strip():
                        commands[-1][2].append(line)
                    continue
                line = line[2:]
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if line == "echo $?":
                status = int(lines[n + 1].strip())
                commands[-1] = (commands[-1][0], status, commands[-1][2])
                skip = True
                continue
            commands.append((line, 0, []))
        interrupt = float(step.options["interrupt"]) if "interrupt" in step.options else None
        ready = step.options.get("ready", "").replace("_", " ") or None
        for command, status, shown in commands:
            output = self.command(command, status, interrupt, ready)
            if shown and output is not None:
                logs = (interrupt is not None or step.options.get("output") == "lines"
                        or command.startswith(("tail ", "cat ")))  # a log file
                self.compare(command, shown, output, logs=logs)

    def compare(self, command: str, shown: list[str], output: str, logs: bool) -> None:
        """The output the page shows for ``command`` is what it printed, up to what changes
        from run to run (see :func:`normalized`); a line ``...`` stands for any lines. For a
        program that runs until stopped (``logs``), whose lines come in the order its threads
        write them, each line shown is one of the lines it printed."""
        actual = [line for line in output.split("\n") if line.strip()]
        if logs:
            # What it printed before it was stopped; the lines after the ^C are the page's
            # picture of a shutdown, written by threads the stop races with.
            printed = {normalized(line) for line in actual}
            before = [line for line in shown if line.strip() != "..."]
            stop = next((i for i, line in enumerate(before) if line.startswith("^C")), None)
            ok = all(normalized(line) in printed for line in before[:stop])
        else:
            ok = matches(shown, actual)
        if not ok:
            raise StepFailed(
                f"the page shows another output for {command!r} than it printed; it "
                "printed:\n" + "\n".join(actual) + "\n(the page shows)\n" + "\n".join(shown))

    def command(self, command: str, status: int, interrupt: float | None,
                ready: str | None = None) -> str | None:
        """Run ``command``; what it printed (``None``: nothing the test could read)."""
        if command.startswith(NOT_RUN):
            return None
        words = shlex.split(command)
        if words[0] in ("tail", "cat"):
            return self.read(command, words)
        if words[0] == "export":
            name, _, value = words[1].partition("=")
            self.env[name] = value
            return None
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
            return self.in_process(command, words[1:], env, status)
        if words[0] == "dbscheduler":
            argv = [sys.executable, "-m", "dbscheduler", *words[1:]]
        elif words[0] in ("python", "python3"):
            argv = [sys.executable, *words[1:]]
        else:
            raise StepFailed(f"the docs show {command!r}, which no test runs: run it (a "
                             "dbscheduler or python command) or list it in NOT_RUN")
        print(f"$ {command}", file=sys.stderr, flush=True)
        proc: subprocess.Popen[bytes] | Forked
        if threading.active_count() == 1:  # forking is safe: no other thread holds a lock
            proc = Forked(argv[1:], env, stdout)
        else:
            proc = subprocess.Popen(argv, env=env, stdout=stdout or subprocess.PIPE,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        if background:
            self.background.append((command, proc))
            return None
        out = proc.stdout
        assert out is not None
        lines: list[bytes] = []
        reader = threading.Thread(target=lambda: lines.extend(iter(out.readline, b"")))
        reader.start()
        if interrupt is not None:
            # Ctrl-C once the program is up (it printed `ready`), `interrupt` seconds later:
            # a signal that comes while it still imports would only show a traceback.
            deadline = time.monotonic() + 60
            while ready and not any(ready.encode() in line for line in lines):
                if proc.poll() is not None or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            try:
                proc.wait(timeout=interrupt)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise StepFailed(f"{command!r} did not end within 60 s") from None
        reader.join()
        printed = b"".join(lines).decode(errors="replace")
        sys.stderr.write(printed)
        if proc.returncode != status:
            raise StepFailed(f"{command!r} exited {proc.returncode}, the page says {status}")
        return printed

    def read(self, command: str, words: list[str]) -> str:
        """``cat FILE`` and ``tail -n N FILE`` of a file the page's programs wrote."""
        print(f"$ {command}", file=sys.stderr, flush=True)
        *options, name = words[1:]
        lines = Path(name).read_text().splitlines(keepends=True)
        if words[0] == "tail":
            if options[:1] != ["-n"] or len(options) != 2:
                raise StepFailed(f"{command!r}: the runner knows `tail -n N FILE` only")
            lines = lines[-int(options[1]):]
        printed = "".join(lines)
        sys.stderr.write(printed)
        return printed

    def in_process(self, command: str, args: list[str], env: dict[str, str], status: int) -> str:
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
        return result.output

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


def run(path: Path, urls: dict[str, str]) -> int:
    """Run every step of the page at ``path`` in the working directory; 0 when all passed."""
    sys.path.insert(0, os.getcwd())
    page = Page(path, urls)
    current: Step | None = None
    try:
        for current in steps(path):
            started = time.monotonic()
            page.run(current)
            print(f"-- {path.name}:{current.line} {current.kind} "
                  f"{time.monotonic() - started:.2f}s", file=sys.stderr, flush=True)
        current = None
        page.stop_background()
        page.stop_schedulers()
        return 0
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
        return 1


def fork_page(job: dict[str, Any], workdir: Path) -> tuple[int, Path]:
    """Run one page in a child process of this one (forked: the imports are done once)."""
    output = workdir.with_suffix(".log")
    pid = os.fork()
    if pid == 0:  # the child: its own directory, output and namespace
        code = 1
        try:
            os.chdir(workdir)
            fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            code = run(Path(job["page"]), job["urls"])
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)  # no thread an example left running may keep the child alive
    return pid, output


def main() -> None:
    """``python -m tests.docs.run_page JOBS RESULTS``: run the pages of the JSON list JOBS
    (``[{"page": path, "urls": {placeholder: url}}]``), ``PARALLEL`` at a time, and write
    ``{page: {"returncode": n, "output": text}}`` to RESULTS."""
    jobs = json.loads(Path(sys.argv[1]).read_text())
    # Imported once here, before forking, instead of once per page and command.
    for module in ("dbscheduler.cli", "dbscheduler.testing", "dbscheduler.web.app",
                   "fastapi.testclient", "uvicorn", "prometheus_client"):
        importlib.import_module(module)

    results: dict[str, dict[str, Any]] = {}
    running: dict[int, tuple[str, Path, float]] = {}
    pending = list(jobs)
    with tempfile.TemporaryDirectory(prefix="docs-") as tmp:
        while pending or running:
            while pending and len(running) < PARALLEL:
                job = pending.pop(0)
                workdir = Path(tmp) / f"page{len(pending)}"
                workdir.mkdir()
                pid, output = fork_page(job, workdir)
                running[pid] = (job["page"], output, time.monotonic() + PAGE_TIMEOUT)
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                for child, (_, _, deadline) in running.items():
                    if time.monotonic() > deadline:
                        os.kill(child, signal.SIGKILL)
                time.sleep(0.02)
                continue
            page, output, deadline = running.pop(pid)
            code = os.waitstatus_to_exitcode(status)
            text = output.read_text(errors="replace") if output.exists() else ""
            if time.monotonic() > deadline:
                text += f"\nthe page's examples did not end within {PAGE_TIMEOUT} s"
            took = time.monotonic() - deadline + PAGE_TIMEOUT
            results[page] = {"returncode": code, "output": text, "seconds": round(took, 2)}
    Path(sys.argv[2]).write_text(json.dumps(results))


if __name__ == "__main__":
    main()
