"""A node with the handler ``record`` (and nothing declared): appends one JSON line per run
to the file given, then runs until terminated. Usage: runtime_node.py URL TABLE NODE FILE."""

from __future__ import annotations

import json
import sys
import time
from datetime import timedelta

from dbscheduler import Scheduler, TaskContext

url, table, node, out = sys.argv[1:5]
scheduler = Scheduler(url, table=table, node_id=node, poll_interval=timedelta(seconds=0.2))


@scheduler.handler("record")
def record(ctx: TaskContext) -> None:
    line = json.dumps({"name": ctx.name, "data": ctx.data, "node": ctx.node_id,
                       "token": ctx.total_attempt})
    with open(out, "a", encoding="utf-8") as f:
        f.write(line + "\n")
    time.sleep(0.05)


scheduler.start()
print("ready", flush=True)
while True:  # until the test terminates the process
    time.sleep(1)
