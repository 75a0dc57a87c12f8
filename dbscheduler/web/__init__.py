"""The web dashboard and REST API: ``create_app(scheduler_or_url) -> ASGI app``.

Needs the ``web`` extra (``pip install 'dbscheduler[web]'``: FastAPI, Jinja2, uvicorn)::

    from fastapi import FastAPI
    from dbscheduler.web import create_app

    app = FastAPI()
    app.mount("/scheduler", create_app(scheduler))

or, stand-alone: ``dbscheduler web --url postgresql+psycopg://app@db/app``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import Auth, Role, create_app

__all__ = ["Auth", "Role", "create_app"]


def __getattr__(name: str) -> Any:
    # Imported on first use, so that `dbscheduler web --help` (and the rest of the command
    # line) works without the web extra installed.
    if name in __all__:
        try:
            from . import app
        except ImportError as exc:
            raise ImportError(
                f"dbscheduler.web needs the web extra: pip install 'dbscheduler[web]' ({exc})"
            ) from exc
        return getattr(app, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
