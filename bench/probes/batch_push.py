"""Pushes per second of keyed delayed batches: ``python -m bench.probes.batch_push [--url URL …]``.

Several processes (``--procs``, each its own :class:`~dbscheduler.Client`) push as fast as they
can for ``--seconds`` per scenario, on a fresh table:

* **one hot key**, ``update="always"`` and ``update="once"`` (the key is due in an hour: only
  the pushes are measured);
* **one hot key while it is delivered**: due at once, and a node (``max_workers=4``) delivers
  it over and over, so most pushes meet the key's row leased to a delivery;
* **10,000 keys**: each push to a random one of 10,000 keys (the first push of a key creates
  its row).

Printed per scenario: pushes/s over all processes, the latency of one push (p50, p99) and the
statements a push sends (round trips). With several URLs, one block each.
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import statistics
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

DEFAULT_URLS = [
    "postgresql+psycopg://postgres@127.0.0.1:5432/test",
    "mysql+pymysql://root@127.0.0.1:3306/test",
]


@dataclass(frozen=True)
class Scenario:
    name: str
    keys: int
    update: str
    due_now: bool = False


SCENARIOS = [
    Scenario("one hot key, always", 1, "always"),
    Scenario("one hot key, once", 1, "once"),
    Scenario("one hot key, delivered meanwhile", 1, "always", due_now=True),
    Scenario("10,000 keys", 10_000, "always"),
]


def _pusher(url: str, table: str, scenario: Scenario, seconds: float, seed: int,
            out: Any) -> None:
    from dbscheduler import Client

    rng = random.Random(seed)
    statements = [0]
    with Client(url, table=table) as client:
        sa.event.listen(client.engine, "before_cursor_execute",
                        lambda *a, **k: statements.__setitem__(0, statements[0] + 1))
        client.db_now()  # connect before the clock starts
        statements[0] = 0
        latencies: list[float] = []
        ontime = None if scenario.due_now else time.time() + 3600
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            key = "hot" if scenario.keys == 1 else f"k-{rng.randrange(scenario.keys)}"
            t0 = time.perf_counter()
            client.push(key, {"n": len(latencies)}, handler="bench", ontime=ontime,
                        update=scenario.update)
            latencies.append(time.perf_counter() - t0)
    out.put((latencies, statements[0]))


def _run(url: str, scenario: Scenario, procs: int, seconds: float) -> dict[str, float]:
    from dbscheduler import Scheduler
    from dbscheduler.migrate import upgrade

    table = f"bench_{uuid.uuid4().hex[:8]}"
    engine = sa.create_engine(url)
    upgrade(engine, table)
    node: Scheduler | None = None
    delivered = [0]
    try:
        if scenario.due_now:
            node = Scheduler(url, table=table, max_workers=4, poll_interval=0.2)
            lock = threading.Lock()

            @node.batch_handler("bench")
            def bench(ctx: Any, items: list[Any]) -> None:
                with lock:
                    delivered[0] += len(items)

            node.start()
        context = multiprocessing.get_context("spawn")
        out = context.Queue()
        workers = [context.Process(target=_pusher, args=(url, table, scenario, seconds, i, out))
                   for i in range(procs)]
        for w in workers:
            w.start()
        results = [out.get(timeout=seconds + 120) for _ in workers]
        for w in workers:
            w.join()
        latencies = sorted(x for lat, _ in results for x in lat)
        pushes = len(latencies)
        statements = sum(n for _, n in results)
        return {
            "pushes_per_s": pushes / seconds,
            "p50_ms": statistics.median(latencies) * 1000,
            "p99_ms": latencies[min(pushes - 1, int(pushes * 0.99))] * 1000,
            "statements_per_push": statements / pushes,
            "delivered_during": float(delivered[0]),
        }
    finally:
        if node is not None:
            node.shutdown(timeout=10)
        for name in (f"{table}_items", table, f"{table}_version"):
            sa.Table(name, sa.MetaData()).drop(engine, checkfirst=True)
        engine.dispose()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", action="append", help="database URL (repeat); default "
                   "PostgreSQL and MariaDB on localhost")
    p.add_argument("--procs", type=int, default=4, help="pushing processes")
    p.add_argument("--seconds", type=float, default=5.0, help="per scenario")
    args = p.parse_args(argv)
    for url in args.url or DEFAULT_URLS:
        backend = sa.engine.make_url(url).get_backend_name()
        print(f"\n{backend}: {args.procs} pushing processes, {args.seconds:g} s per scenario\n")
        print("| scenario | pushes/s | p50 ms | p99 ms | statements/push |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for scenario in SCENARIOS:
            r = _run(url, scenario, args.procs, args.seconds)
            extra = (f" ({int(r['delivered_during']):,} delivered meanwhile)"
                     if scenario.due_now else "")
            print(f"| {scenario.name}{extra} | {r['pushes_per_s']:,.0f} | {r['p50_ms']:.2f} | "
                  f"{r['p99_ms']:.2f} | {r['statements_per_push']:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
