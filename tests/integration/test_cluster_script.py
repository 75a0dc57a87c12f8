"""``bash examples/cluster.sh`` as a newcomer runs it: no activated venv, no database set up,
from any directory; the killed node's task is retried as attempt 2."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_cluster_script_from_scratch(tmp_path: Path) -> None:
    if not (ROOT / ".venv" / "bin" / "dbscheduler").exists():
        pytest.skip("the checkout has no .venv (the README's set-up creates it)")
    env = {"HOME": os.environ.get("HOME", str(tmp_path)), "PATH": "/usr/bin:/bin",
           "CLUSTER_SECONDS": "10", "CLUSTER_KILL_AFTER": "2", "CLUSTER_LIST_EVERY": "1"}
    proc = subprocess.run(["bash", str(ROOT / "examples" / "cluster.sh")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=90, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "command not found" not in out
    assert (tmp_path / "cluster.sqlite3").exists()  # the default: a file where it was run
    assert "upgraded table scheduled_tasks on sqlite:///cluster.sqlite3" in out
    victim = re.search(r"^=== kill -9 (node-\d) while it runs rebuild-index", out, re.M)
    assert victim, out
    # The script runs on (past its 10 s) until another node has taken the task over.
    assert re.search(rf"^=== node-\d took rebuild-index over from {victim.group(1)}$", out,
                     re.M), out
    # The lost execution is a failed attempt, and its retry comes before the next regular run.
    assert re.search(r"^\[node-\d\] .* rebuild-index resumes: attempt 2 of this occurrence",
                     out, re.M), out


def test_cluster_script_says_how_to_install_when_dbscheduler_is_missing(tmp_path: Path) -> None:
    # A copy of the script outside the checkout: no .venv next to it, nothing on the PATH.
    script = tmp_path / "examples" / "cluster.sh"
    script.parent.mkdir()
    script.write_text((ROOT / "examples" / "cluster.sh").read_text())
    proc = subprocess.run(["bash", str(script)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=30, env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 1
    assert "no dbscheduler command" in proc.stderr
    assert "python3 -m venv .venv" in proc.stderr
    assert "command not found" not in proc.stderr
