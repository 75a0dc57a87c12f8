"""What every scenario asserts afterwards, computed from the nodes' event logs and the table.

The logs come from ``tests/harness/node.py`` (``start``/``end``/``finished``/``lease_lost``
events with task, node, fencing token and wall-clock times: every node runs on this machine,
so they share one clock), read into runs by :mod:`tests.harness.runs`. The harness adds what
it did to the nodes (kill -9 times, SIGSTOP/SIGCONT windows, graceful exits). :func:`analyse`
turns both into a :class:`Report`: counts for the figures and one line per problem, so a
scenario records its figures first and asserts after.

The checks, per task:

* **no overlap**: sorted by start, no execution starts before every earlier one has ended.
  An execution that never logged its end ended when its node was killed. A *zombie*'s
  execution (its node was frozen with SIGSTOP and lost its lease meanwhile) counts as ended
  when the node was frozen, provided it stopped within ``zombie_grace`` of SIGCONT: that is
  the fencing contract (a node that lost its lease writes nothing), the frozen process could
  do nothing meanwhile.
* **fencing tokens** never repeat and grow in start order; a lease-lost execution's finish is
  never written.
* **the state chain** (nodes run with ``--state``): each execution stores its token as the
  task's state and logs the token it read. The token read must be the last *written* one
  before it: a finish that was refused but landed, or one that was written but lost, breaks
  the chain.
* **liveness**: every task ran (and wrote its finish) after the last fault; the longest gap
  between two starts stays under a bound; nothing was left unfinished.
* **the table**: exactly one row per task name (none lost, none duplicated), no row held with
  an expired lease that nobody picks (sampled while the nodes run), nothing held once every
  node stopped, ``total_attempt`` >= every token seen, the stored state a token that ran.
"""

from __future__ import annotations

import itertools
import json
import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from dbscheduler.table import RESERVED_PREFIX, make_table
from tests.harness.runs import Run, runs_from

MAX_LINES = 12
"""Problem lines kept per kind (the counts are always complete)."""


@dataclass
class Report:
    """Figures of one scenario run and every problem found."""

    scenario: str
    backend: str
    seconds: float = 0.0
    faults: Counter[str] = field(default_factory=Counter)
    executions: int = 0
    written: int = 0
    overlaps: int = 0
    token_repeats: int = 0
    fencing_violations: int = 0
    lost_rows: int = 0
    duplicated_rows: int = 0
    stuck_rows: int = 0
    max_gap: float = 0.0
    zombie_stop_latency: float = 0.0
    ambiguous_commits: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    problems: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))

    def problem(self, kind: str, text: str) -> None:
        self.problems[kind].append(text)

    def figures(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "backend": self.backend,
            "seconds": round(self.seconds, 1),
            "faults": dict(self.faults),
            "executions": self.executions,
            "finishes_written": self.written,
            "overlaps": self.overlaps,
            "token_repeats": self.token_repeats,
            "fencing_violations": self.fencing_violations,
            "lost_rows": self.lost_rows,
            "duplicated_rows": self.duplicated_rows,
            "stuck_rows": self.stuck_rows,
            "max_gap_seconds": round(self.max_gap, 2),
            "zombie_stop_latency_seconds": round(self.zombie_stop_latency, 3),
            "ambiguous_commits": self.ambiguous_commits,
            "problems": sum(len(v) for v in self.problems.values()),
            **self.extra,
        }

    def assert_ok(self) -> None:
        """Fail with every kind of problem found (a few lines of each)."""
        if not any(self.problems.values()):
            return
        lines = [f"{self.scenario} on {self.backend}: problems found"]
        for kind, items in self.problems.items():
            if not items:
                continue
            lines.append(f"- {kind}: {len(items)}")
            lines.extend(f"    {text}" for text in items[:MAX_LINES])
            if len(items) > MAX_LINES:
                lines.append(f"    … {len(items) - MAX_LINES} more")
        lines.append(f"figures: {self.figures()}")
        raise AssertionError("\n".join(lines))


@dataclass(frozen=True)
class NodeHistory:
    """What the harness did to the nodes, by node name (restarts reuse the name)."""

    kills: Mapping[str, Sequence[float]]
    freezes: Mapping[str, Sequence[tuple[float, float]]]
    exits: Mapping[str, Sequence[float]]


def _first_after(times: Sequence[float], t: float) -> float | None:
    later = [x for x in times if x >= t]
    return min(later) if later else None


def analyse(
    report: Report,
    events: Sequence[Mapping[str, Any]],
    history: NodeHistory,
    *,
    tasks: Sequence[str],
    fault_end: float,
    gap_limit: float | None,
    zombie_grace: float = 2.0,
    abandoned: frozenset[tuple[str, str]] = frozenset(),
    ambiguous_ok: bool = False,
) -> list[Run]:
    """Check the executions in ``events``; fill ``report``; return the runs.

    ``abandoned``: ``(task, node)`` pairs whose executions are allowed to never return
    (scenario 6); they are left out of the overlap check and checked by the scenario itself.
    ``ambiguous_ok``: the database cut connections, so a finish whose commit succeeded while
    its acknowledgement was lost may be reported as not written (counted, not a problem).
    """
    runs = runs_from(events)
    report.executions = len(runs)
    report.written = sum(r.written is True for r in runs)
    by_task: dict[str, list[Run]] = defaultdict(list)
    for run in runs:
        by_task[run.task].append(run)

    # -- when did each execution end ---------------------------------------------------------
    for run in runs:
        if run.end is not None:
            run.eff_end = run.end
        else:
            killed = _first_after(history.kills.get(run.node, ()), run.start)
            exited = _first_after(history.exits.get(run.node, ()), run.start)
            if killed is not None and (exited is None or killed <= exited):
                run.eff_end, run.how_ended = killed, "killed"
            elif exited is not None:
                run.eff_end, run.how_ended = exited, "process exited"
                if (run.task, run.node) not in abandoned:
                    report.problem("never ended", f"{run.task} token {run.token} on {run.node} "
                                   "never returned although its node shut down gracefully")
            else:
                run.how_ended = "never"
                report.problem("never ended", f"{run.task} token {run.token} on {run.node}")
        for stopped, resumed in history.freezes.get(run.node, ()):
            if run.start <= stopped < run.eff_end and run.eff_end > resumed and (
                run.lease_lost or run.written is False
            ):
                latency = run.eff_end - resumed
                report.zombie_stop_latency = max(report.zombie_stop_latency, latency)
                if latency > zombie_grace:
                    report.problem("zombie kept running", (
                        f"{run.task} token {run.token} on {run.node} ran {latency:.2f} s after "
                        f"SIGCONT although its lease was lost (grace {zombie_grace} s)"))
                run.eff_end, run.how_ended = stopped, "frozen (zombie)"

    for task, items in by_task.items():
        # -- tokens ----------------------------------------------------------------------------
        counts = Counter(r.token for r in items)
        for token, n in counts.items():
            if n > 1:
                report.token_repeats += n - 1
                nodes = sorted(r.node for r in items if r.token == token)
                report.problem("fencing token repeats", f"{task} token {token} ran on {nodes}")
        items.sort(key=lambda r: (r.start, r.token))
        for a, b in itertools.pairwise(items):
            if b.token <= a.token:
                report.problem("token order", (
                    f"{task}: token {b.token} on {b.node} started at {b.start:.3f}, after "
                    f"token {a.token} on {a.node} at {a.start:.3f}"))
        # -- overlaps --------------------------------------------------------------------------
        holder: Run | None = None
        for run in items:
            if (run.task, run.node) in abandoned:
                continue
            if holder is not None and run.start < holder.eff_end:
                report.overlaps += 1
                report.problem("overlap", (
                    f"{task}: token {holder.token} on {holder.node} [{holder.start:.3f}, "
                    f"{holder.eff_end:.3f}] ({holder.how_ended}) and token {run.token} on "
                    f"{run.node} from {run.start:.3f} ({holder.eff_end - run.start:.3f} s)"))
            if holder is None or run.eff_end > holder.eff_end:
                holder = run
        # -- finishes of executions told their lease was lost ---------------------------------
        # A node that could not reach the database for a lease assumes it lost its leases;
        # when nobody took the row meanwhile, its fenced finish still lands, rightly. Whether
        # a finish landed after another node took the row is what the state chain proves.
        report.extra["lease_lost_but_written"] = report.extra.get(
            "lease_lost_but_written", 0) + sum(bool(r.lease_lost and r.written) for r in items)
        # -- the state chain -------------------------------------------------------------------
        chained = [r for r in items if r.has_prev]
        if chained:
            _check_chain(report, task, sorted(chained, key=lambda r: r.token), history,
                         ambiguous_ok)
        # -- liveness --------------------------------------------------------------------------
        starts = sorted(r.start for r in items)
        for a_t, b_t in itertools.pairwise(starts):
            report.max_gap = max(report.max_gap, b_t - a_t)
            if gap_limit is not None and b_t - a_t > gap_limit:
                report.problem("stalled", (
                    f"{task}: no execution started for {b_t - a_t:.2f} s (from {a_t:.3f}); "
                    f"bound {gap_limit:.1f} s"))

    for task in tasks:
        after = [r for r in by_task.get(task, []) if r.start >= fault_end and r.written]
        if not after:
            report.problem("did not run after the faults",
                           f"{task}: no execution with a written finish after {fault_end:.3f}")
    return runs


def _check_chain(report: Report, task: str, runs: list[Run], history: NodeHistory,
                 ambiguous_ok: bool) -> None:
    by_token = {r.token: r for r in runs}
    written = sorted(r.token for r in runs if r.written)
    for run in runs:
        prev = run.prev
        if prev is not None and prev >= run.token:
            report.fencing_violations += 1
            report.problem("state chain", f"{task} token {run.token} read state of token {prev}")
            continue
        missed = [w for w in written if (prev or 0) < w < run.token]
        if missed:
            report.fencing_violations += 1
            report.problem("state chain", (
                f"{task} token {run.token} on {run.node} read the state of token {prev}, but "
                f"token(s) {missed} reported their finish written: written after this pick "
                "(fencing broken) or before it and lost"))
        if prev is None:
            continue
        source = by_token.get(prev)
        if source is None:
            # Picked, then killed before its start was logged: its finish cannot have run.
            report.fencing_violations += 1
            report.problem("state chain", f"{task} token {run.token} read state of token "
                           f"{prev}, which never started")
        elif source.written is False:
            if ambiguous_ok:
                report.ambiguous_commits += 1
            else:
                report.fencing_violations += 1
                report.problem("state chain", (
                    f"{task} token {run.token} read the state of token {prev} on "
                    f"{source.node}, whose finish was reported refused: a fenced write landed"))
        elif source.written is None and not _killed_after(history, source):
            report.problem("state chain", (
                f"{task} token {prev} on {source.node} logged no finish but its state was "
                "stored"))


def _killed_after(history: NodeHistory, run: Run) -> bool:
    return _first_after(history.kills.get(run.node, ()), run.start) is not None


# -- the table --------------------------------------------------------------------------------
@dataclass(frozen=True)
class TableState:
    rows: list[dict[str, Any]]
    db_now: datetime


def read_table(url: str, table: str) -> TableState:
    """Every row of the table and the database time, read with a fresh engine."""
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    t = make_table(table)
    try:
        with engine.connect() as conn:
            rows = [dict(r._mapping) for r in conn.execute(sa.select(t))]
            now = conn.execute(sa.select(_db_now())).scalar_one()
    finally:
        engine.dispose()
    from dbscheduler.dialects.types import to_utc

    db_now = to_utc(now)
    assert db_now is not None
    return TableState(rows, db_now)


def _db_now() -> Any:
    from dbscheduler.dialects import db_now

    return db_now()


def stuck_rows(state: TableState, margin: float) -> list[str]:
    """Rows held (``locked_by`` set) whose lease expired more than ``margin`` seconds ago."""
    out = []
    for row in state.rows:
        if row["locked_by"] is not None and row["next_process_at"] < state.db_now - timedelta(
            seconds=margin
        ):
            expired = (state.db_now - row["next_process_at"]).total_seconds()
            out.append(f"{row['queue_name']} held by {row['locked_by']}, lease expired "
                       f"{expired:.1f} s ago")
    return out


def check_table(report: Report, state: TableState, runs: Sequence[Run], *, tasks: Sequence[str],
                stopped: bool, state_chain: bool) -> None:
    """One row per task, nothing held once every node stopped, counters consistent."""
    names = Counter(str(r["queue_name"]) for r in state.rows)
    expected = set(tasks)
    for name in sorted(expected - set(names)):
        report.lost_rows += 1
        report.problem("row lost", name)
    for name, n in sorted(names.items()):
        if n > 1:
            report.duplicated_rows += n - 1
            report.problem("row duplicated", f"{name} x{n}")
        if name not in expected and not name.startswith(RESERVED_PREFIX):  # built-in tasks
            report.problem("unexpected row", name)
    max_token: dict[str, int] = defaultdict(int)
    tokens: dict[str, set[int]] = defaultdict(set)
    for run in runs:
        max_token[run.task] = max(max_token[run.task], run.token)
        tokens[run.task].add(run.token)
    for row in state.rows:
        name = str(row["queue_name"])
        if int(row["total_attempt"]) < max_token[name]:
            report.problem("token beyond the table", (
                f"{name}: total_attempt {row['total_attempt']} < token {max_token[name]} seen"))
        if stopped and row["locked_by"] is not None:
            report.stuck_rows += 1
            report.problem("held after every node stopped",
                           f"{name} locked_by {row['locked_by']}")
        try:
            payload = None if row["payload"] is None else json.loads(row["payload"])
        except ValueError as exc:
            report.problem("payload not JSON", f"{name}: {exc}")
            continue
        if state_chain and payload is not None:
            token = payload.get("token") if isinstance(payload, dict) else None
            if token not in tokens[name]:
                report.problem("stored state", f"{name}: state {payload} is from no execution")
            written = [r.token for r in runs if r.task == name and r.written]
            if written and isinstance(token, int) and token < max(written):
                report.fencing_violations += 1
                report.problem("stored state", (
                    f"{name}: stored state of token {token}, older than the last written "
                    f"finish {max(written)}"))
        if row["last_status"] not in (None, "success", "error", "lost", "cancelled"):
            report.problem("bad last_status", f"{name}: {row['last_status']!r}")


def start_lags(runs: Sequence[Run]) -> list[float]:
    """``started - scheduled`` on the database clock, per execution (seconds)."""
    return [r.started_db - r.scheduled for r in runs]


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return 0.0
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


# -- the nodes' stderr -------------------------------------------------------------------------
_LOG_LINE = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ (?P<node>\S+) (?P<logger>\S+) "
    r"(?P<level>WARNING|ERROR|CRITICAL) (?P<message>.*)$"
)


def log_lines(text: str) -> list[tuple[str, str, str]]:
    """``(logger, level, message)`` of every WARNING+ line a node wrote to stderr."""
    out = []
    for line in text.splitlines():
        m = _LOG_LINE.match(line)
        if m:
            out.append((m["logger"], m["level"], m["message"]))
    return out


DEADLOCK = "Deadlock found when trying to get lock"
"""MariaDB's deadlock error: it happens without any injected fault (scenario 5 reports it);
the other scenarios count it separately instead of failing on its repetitions."""


def repeated_warnings(report: Report, stderr: Mapping[str, str], allowed: int) -> None:
    """An identical WARNING+ line repeated more than ``allowed`` times on one node is a fault
    logged per poll (or per retry), not once."""
    total = deadlocks = 0
    for node, text in sorted(stderr.items()):
        lines = log_lines(text)
        total += len(lines)
        for (logger, level, message), n in Counter(lines).items():
            if DEADLOCK in message:
                deadlocks += n
            elif n > allowed:
                report.problem("warning repeated", (
                    f"{node}: {n} x {level} {logger}: {message[:160]} (allowed {allowed})"))
    report.extra["warning_lines"] = total
    report.extra["deadlock_warnings"] = deadlocks
