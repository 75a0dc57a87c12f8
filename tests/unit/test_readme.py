"""The README's set-up commands are the ones CI and the examples really use."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _shell_blocks(text: str) -> list[str]:
    return [b.strip() for b in re.findall(r"```sh\n(.*?)```", text, flags=re.S)]


def test_ci_runs_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    test_command = next(b for b in _shell_blocks(readme) if "pytest" in b)
    assert test_command in ci.splitlines(), "the README's test command must be .ci/run's"


def test_readme_demo_runs_an_example_that_exists() -> None:
    readme = (ROOT / "README.md").read_text()
    demo = _shell_blocks(readme)[0]
    script = re.search(r"(examples/\S+\.py)", demo)
    assert script and (ROOT / script.group(1)).is_file(), demo
