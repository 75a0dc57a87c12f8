"""A node draining one-off jobs of the handler ``drain``: appends one JSON line per run to
the file given (one ``write`` of a line opened for appending: lines of several processes never
interleave), then runs until terminated. Usage: drain_node.py URL TABLE NODE FILE."""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import timedelta

from dbscheduler import Scheduler, TaskContext

url, table, node, out = sys.argv[1:5]
scheduler = Scheduler(url, table=table, node_id=node, max_workers=8, lease=30,
                      poll_interval=timedelta(seconds=0.2), history=None, overdue_check=None)
fd = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)


@scheduler.handler("drain")
def drain(ctx: TaskContext) -> None:
    line = json.dumps({"name": ctx.name, "node": ctx.node_id, "token": ctx.total_attempt})
    os.write(fd, (line + "\n").encode())
    time.sleep(0.002)  # a job's work: lets the other nodes reach the backlog too


scheduler.start()
print("ready", flush=True)
while True:  # until the test terminates the process
    time.sleep(1)
