"""The suite's own database servers: private, restartable, and gone when their owner is.

Run as root on a machine whose own PostgreSQL and MariaDB hold other people's data, the
suite must neither write to those servers nor restart them (see tests/servers/).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.chaos.faults import Server
from tests.databases import find
from tests.servers import ROOT, PrivateMariaDB, PrivatePostgres, alive, answers

SERVERS = pytest.mark.parametrize("backend", ["postgresql", "mysql"])
STANDARD_PORTS = {"postgresql": 5432, "mysql": 3306}


@SERVERS
def test_without_a_url_the_suite_uses_a_private_server(backend: str) -> None:
    if os.environ.get(f"DBSCHEDULER_TEST_{backend.upper()}_URL"):
        pytest.skip("a server was given by URL: the suite uses it")
    found = find(backend)
    if found.url is None:
        pytest.skip(found.reason)
    assert found.server is not None, found
    assert found.server.port != STANDARD_PORTS[backend], found
    assert found.server.pid() is not None and answers(found.url), found


@SERVERS
def test_a_server_given_by_url_is_never_restarted(backend: str) -> None:
    url = f"{backend}://nobody@127.0.0.1:{STANDARD_PORTS[backend]}/test"
    given = Server(backend, url)
    reason = given.restart_unavailable()
    assert reason is not None and "restarts only the private servers" in reason, reason
    with pytest.raises(AssertionError):
        given.restart()


CHILD = """
import json, sys, time
from tests.servers import throwaway, PrivatePostgres, PrivateMariaDB
servers = [throwaway(cls) for cls in (PrivatePostgres, PrivateMariaDB)]
print(json.dumps([[str(s.owned_root), s.pid()] for s in servers]), flush=True)
time.sleep(600)
"""


def test_a_killed_owner_leaves_no_server_behind() -> None:
    """``kill -9`` of the process that started the servers: its watchdog kills them and
    deletes their directories."""
    if PrivatePostgres.binaries() is None or PrivateMariaDB.binaries() is None:
        pytest.skip("the server binaries are not installed")
    child = subprocess.Popen([sys.executable, "-c", CHILD], cwd=ROOT, stdout=subprocess.PIPE,
                             text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert child.stdout is not None
        started = json.loads(child.stdout.readline())
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert len(started) == 2 and all(pid for _, pid in started), started
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(
            Path(d).exists() or alive(pid) for d, pid in started):
        time.sleep(0.1)
    left = [(d, pid) for d, pid in started if Path(d).exists() or alive(pid)]
    assert not left, f"left behind (directory, server pid): {left}"


def test_missing_binaries_skip_with_the_command_that_installs_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import tests.databases as databases

    monkeypatch.delenv("DBSCHEDULER_TEST_POSTGRESQL_URL", raising=False)
    monkeypatch.setattr(PrivatePostgres, "binaries", staticmethod(lambda: None))
    monkeypatch.setattr(databases, "_docker_answers", lambda: False)
    found = databases.find.__wrapped__("postgresql")
    assert found.url is None
    assert "apt-get install -y postgresql mariadb-server" in found.reason, found.reason


def test_the_servers_live_in_memory_when_it_has_room(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    import tempfile

    import tests.databases as databases

    monkeypatch.delenv(databases.SERVERS_DIR, raising=False)
    monkeypatch.setattr(databases, "MEMORY", tmp_path)
    monkeypatch.setattr(databases, "MEMORY_ROOM", 1)
    assert databases.servers_base() == tmp_path
    monkeypatch.setattr(databases, "MEMORY_ROOM", 1 << 62)  # more than any machine has
    assert databases.servers_base() == Path(tempfile.gettempdir())
    monkeypatch.setattr(databases, "MEMORY", tmp_path / "absent")
    monkeypatch.setattr(databases, "MEMORY_ROOM", 1)
    assert databases.servers_base() == Path(tempfile.gettempdir())
    monkeypatch.setenv(databases.SERVERS_DIR, str(tmp_path / "chosen"))
    assert databases.servers_base() == tmp_path / "chosen"
