"""dbscheduler inside a Flask application (an app factory).

Run it (``pip install dbscheduler flask``)::

    flask --app examples.flask_app run
    curl localhost:5000/tasks
    curl -X POST localhost:5000/tasks/send-reminders/trigger

With gunicorn (``gunicorn "examples.flask_app:create_app()"``) every worker process is a node,
and each task still runs once at a time across all of them. Do not use ``--preload``: the
scheduler's threads must start in the worker, after the fork, which is what creating the app
in the worker does. ``flask run --debug`` imports the app twice (reloader): the scheduler starts
only in the process that serves. ``DBSCHEDULER_URL`` chooses the database (default: the
embedded SQLite file ``./dbscheduler.sqlite3``).
"""

from __future__ import annotations

import atexit
import logging
import os
from typing import Any

from flask import Flask, abort, jsonify
from flask.typing import ResponseReturnValue

from dbscheduler import FixedDelay, FixedRate, Scheduler, TaskContext, TaskNotFound, TaskRunning

# The application configures logging, the library never does. Without this, uvicorn/flask
# show their own lines only and the tasks' (and dbscheduler's) INFO lines go nowhere. A no-op
# when logging is configured already (e.g. uvicorn --log-config).
logging.basicConfig(level=logging.INFO,
                    format="%(asctime)s %(levelname)-7s %(name)s: %(message)s")
log = logging.getLogger("flask_app")


def build_scheduler(url: str | None = None) -> Scheduler:
    """The application's scheduler and its tasks."""
    scheduler = Scheduler(url or os.environ.get("DBSCHEDULER_URL"))

    @scheduler.task("send-reminders", schedule=FixedRate(300))
    def send_reminders(ctx: TaskContext) -> None:
        log.info("reminders sent (run #%d on %s)", ctx.total_attempt, ctx.node_id)

    @scheduler.task("compact-uploads", schedule=FixedDelay(3600))
    def compact_uploads(ctx: TaskContext) -> None:
        log.info("uploads compacted")

    return scheduler


def create_app(url: str | None = None, start: bool = True) -> Flask:
    """The Flask app; its scheduler is ``app.extensions["dbscheduler"]``, stopped at exit."""
    app = Flask(__name__)
    scheduler = build_scheduler(url)
    app.extensions["dbscheduler"] = scheduler

    @app.get("/tasks")
    def list_tasks() -> ResponseReturnValue:
        return jsonify([info.to_dict() for info in scheduler.tasks()])

    @app.post("/tasks/<name>/trigger")
    def trigger_task(name: str) -> ResponseReturnValue:
        try:
            scheduler.trigger(name)
        except TaskNotFound:
            abort(404, f"no task named {name!r}")
        except TaskRunning as exc:
            abort(409, str(exc))
        body: dict[str, Any] = scheduler.info(name).to_dict()
        return jsonify(body), 202

    reloader_parent = app.debug and os.environ.get("WERKZEUG_RUN_MAIN") != "true"
    if start and not reloader_parent:
        scheduler.start()
        atexit.register(scheduler.shutdown, 10)
    return app
