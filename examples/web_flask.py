"""The dbscheduler dashboard inside a Flask (WSGI) app, through the a2wsgi adapter.

The dashboard is an ASGI app; ``a2wsgi`` runs it under any WSGI server and Werkzeug's
dispatcher mounts it at a prefix (every link in it stays under that prefix). Neither is a
dependency of dbscheduler::

    pip install 'dbscheduler[web]' flask a2wsgi
    flask --app examples.web_flask run
    open http://127.0.0.1:5000/scheduler/

Django is the same idea: in ``wsgi.py`` wrap Django's application and the dashboard with a
dispatcher, e.g. ``DispatcherMiddleware(get_wsgi_application(), {"/scheduler":
ASGIMiddleware(create_app(url, auth=auth))})``, or serve both from an ASGI server.

Here the dashboard is read-only: this example has no login. Give ``auth=`` a function that
returns ``"admin"`` for your operators (from a session, a header set by your proxy …) to
let them pause, trigger and reschedule tasks.
"""

from __future__ import annotations

import os

from a2wsgi import ASGIMiddleware
from flask import Flask
from werkzeug.middleware.dispatcher import DispatcherMiddleware

from dbscheduler import Client
from dbscheduler.web import create_app

# The Flask app needs no Scheduler of its own to show the dashboard: a Client on the nodes'
# database is enough (None: the embedded SQLite default).
client = Client(os.environ.get("DBSCHEDULER_URL"))

app = Flask(__name__)


@app.get("/")
def home() -> dict[str, str]:
    """The app's own routes go on as usual."""
    return {"dashboard": "/scheduler/"}


app.wsgi_app = DispatcherMiddleware(  # type: ignore[method-assign]
    app.wsgi_app, {"/scheduler": ASGIMiddleware(create_app(client, read_only=True))}
)
