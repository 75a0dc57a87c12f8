"""Fixtures of the fault-injection suite: the short/long profile and the run's figures.

By default every scenario runs its short form (CI: the whole suite in well under 3 minutes).
``pytest tests/chaos --chaos-long`` runs each scenario for minutes (>= 10 minutes in all) and
writes its figures to ``tests/chaos/last_long_run.json``; both forms print them at the end
(``DBSCHEDULER_CHAOS_FIGURES=path`` writes them there instead, for either form).
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.chaos.checks import Report
from tests.chaos.parallel import SELECTED, Runner
from tests.chaos.profile import Profile

HERE = Path(__file__).resolve().parent
LONG_RUN_FILE = HERE / "last_long_run.json"


class Figures:
    """Every scenario's report, with the outcome of its test, for the end-of-run summary."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.outcomes: dict[str, str] = {}
        self.started = time.time()

    def add(self, nodeid: str, report: Report) -> None:
        self.rows.append({"test": nodeid, **report.figures()})

    def summary(self, profile: Profile) -> dict[str, Any]:
        rows = [{**r, "outcome": self.outcomes.get(r["test"], "unknown")} for r in self.rows]
        faults: dict[str, int] = {}
        for r in rows:
            for kind, n in r["faults"].items():
                faults[kind] = faults.get(kind, 0) + n
        return {
            "profile": profile.name,
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.started)),
            "wall_seconds": round(time.time() - self.started, 1),
            "machine": f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, "
                       f"python {platform.python_version()}",
            "scenario_runs": len(rows),
            "scenarios": sorted({r["scenario"] for r in rows}),
            "backends": sorted({r["backend"] for r in rows}),
            "scenario_seconds": round(sum(r["seconds"] for r in rows), 1),
            "faults_injected": sum(faults.values()),
            "faults_by_kind": dict(sorted(faults.items())),
            "executions_checked": sum(r["executions"] for r in rows),
            "overlaps": sum(r["overlaps"] for r in rows),
            "token_repeats": sum(r["token_repeats"] for r in rows),
            "fencing_violations": sum(r["fencing_violations"] for r in rows),
            "lost_rows": sum(r["lost_rows"] for r in rows),
            "duplicated_rows": sum(r["duplicated_rows"] for r in rows),
            "stuck_rows": sum(r["stuck_rows"] for r in rows),
            "failed_runs": sum(r["outcome"] != "passed" for r in rows),
            "runs": rows,
        }


_FIGURES_KEY = pytest.StashKey[Figures]()


def _figures(config: pytest.Config) -> Figures:
    if _FIGURES_KEY not in config.stash:
        config.stash[_FIGURES_KEY] = Figures()
    return config.stash[_FIGURES_KEY]


@pytest.fixture(scope="session")
def profile(pytestconfig: pytest.Config) -> Profile:
    return Profile(long=bool(pytestconfig.getoption("--chaos-long")))


@pytest.fixture(params=["sqlite", "postgresql", "mysql"])
def backend(request: pytest.FixtureRequest) -> str:
    """The chaos suite runs on SQLite, PostgreSQL and MariaDB (tests that do not apply to
    SQLite parametrize ``backend`` themselves)."""
    return str(request.param)


@pytest.fixture(scope="session")
def chaos_runner(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory,
                 profile: Profile) -> Iterator[Runner]:
    runner = Runner(pytestconfig, tmp_path_factory.mktemp("chaos"), profile)
    yield runner
    runner.close()


def pytest_collection_finish(session: pytest.Session) -> None:
    session.config.stash[SELECTED] = {item.nodeid for item in session.items}


@pytest.fixture
def record(request: pytest.FixtureRequest) -> Iterator[Any]:
    """``record(report)`` keeps a scenario's figures for the summary (call it before asserting)."""
    figures = _figures(request.config)

    def add(report: Report) -> None:
        figures.add(request.node.nodeid, report)

    yield add


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        _figures(item.config).outcomes[item.nodeid] = report.outcome
    return report


def pytest_sessionfinish(session: pytest.Session) -> None:
    # A pytest-xdist worker hands its figures to the controller, which prints the summary.
    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        figures = _figures(session.config)
        output["chaos_figures"] = json.dumps({"rows": figures.rows,
                                              "outcomes": figures.outcomes,
                                              "started": figures.started})


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    sent = getattr(node, "workeroutput", {}).get("chaos_figures")
    if sent:
        received = json.loads(sent)
        figures = _figures(node.config)
        figures.rows += received["rows"]
        figures.outcomes.update(received["outcomes"])
        figures.started = min(figures.started, received["started"])


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    figures = _figures(config)
    if not figures.rows:
        return
    prof = Profile(long=bool(config.getoption("--chaos-long")))
    summary = figures.summary(prof)
    tr = terminalreporter
    tr.section(f"chaos figures ({prof.name} run)")
    tr.write_line(f"{'scenario':<22}{'backend':<12}{'secs':>6}{'faults':>8}{'execs':>8}"
                  f"{'overlap':>8}{'lost':>6}{'dup':>5}{'stuck':>6}  outcome")
    for r in summary["runs"]:
        tr.write_line(
            f"{r['scenario']:<22}{r['backend']:<12}{r['seconds']:>6.0f}"
            f"{sum(r['faults'].values()):>8}{r['executions']:>8}{r['overlaps']:>8}"
            f"{r['lost_rows']:>6}{r['duplicated_rows']:>5}{r['stuck_rows']:>6}  {r['outcome']}"
        )
    tr.write_line(
        f"total: {summary['scenario_runs']} scenario runs, {summary['faults_injected']} faults "
        f"injected, {summary['executions_checked']} executions checked, overlaps "
        f"{summary['overlaps']}, token repeats {summary['token_repeats']}, lost rows "
        f"{summary['lost_rows']}, duplicated rows {summary['duplicated_rows']}, stuck rows "
        f"{summary['stuck_rows']}, failed runs {summary['failed_runs']}"
    )
    out = LONG_RUN_FILE if prof.long else None
    if os.environ.get("DBSCHEDULER_CHAOS_FIGURES"):
        out = Path(os.environ["DBSCHEDULER_CHAOS_FIGURES"])
    if out is not None:
        out.write_text(json.dumps(summary, indent=2) + "\n")
        tr.write_line(f"figures written to {out}")
