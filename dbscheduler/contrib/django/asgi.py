"""The dashboard in a Django project's ASGI application, behind Django's staff login.

In the project's ``asgi.py``::

    from django.core.asgi import get_asgi_application

    django_app = get_asgi_application()   # first: it sets Django up

    from dbscheduler.contrib.django.asgi import mount

    application = mount(django_app, "/scheduler/")

Requests under ``/scheduler/`` go to the dashboard and its REST API; every other request to
Django. A request is served when its Django session belongs to an active staff user (logged in
through the admin or any login view of the project); anyone else gets 401. Needs the ``web``
extra (``dbscheduler[web]``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from importlib import import_module
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Literal

from django.conf import settings
from django.contrib.auth import get_user
from django.db import close_old_connections

from ._settings import get_client

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
    from starlette.requests import Request

__all__ = ["dashboard", "mount", "staff_role"]

Role = Literal["admin", "viewer"]
Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def staff_role(user: AbstractBaseUser | AnonymousUser) -> Role | None:
    """The default rule: an active staff user operates every task (``"admin"``); anyone
    else is refused.

    >>> staff_role(AnonymousUser()) is None  # doctest: +SKIP
    True
    """
    if user.is_active and getattr(user, "is_staff", False):
        return "admin"
    return None


def dashboard(*, role: Callable[[Any], Role | None] = staff_role,
              read_only: bool = False) -> Any:
    """The dashboard app (ASGI) on the project's table, answering only requests whose Django
    session user ``role(user)`` lets in (``"admin"``, ``"viewer"`` read-only, or ``None``:
    401). :func:`mount` puts it into the project's ASGI application.

    >>> app = dashboard(role=lambda user: "viewer" if user.is_staff else None)  # doctest: +SKIP
    """
    from ...web import create_app

    def auth(request: Request) -> Role | None:
        # Called in a worker thread (the ORM is synchronous); connections opened for the
        # session and the user are closed as Django closes a request's.
        key = request.cookies.get(settings.SESSION_COOKIE_NAME)
        if not key:
            return None
        close_old_connections()
        try:
            store = import_module(settings.SESSION_ENGINE).SessionStore(key)
            return role(get_user(SimpleNamespace(session=store)))
        finally:
            close_old_connections()

    return create_app(get_client(), auth=auth, read_only=read_only)


def mount(application: ASGIApp, path: str = "/scheduler/", app: ASGIApp | None = None) -> ASGIApp:
    """``application`` (the project's ASGI app) with the dashboard at ``path``: requests under
    ``path`` go to ``app`` (default :func:`dashboard`, staff only), every other to
    ``application``.

    >>> application = mount(get_asgi_application(), "/scheduler/")  # doctest: +SKIP
    """
    prefix = "/" + path.strip("/")
    if prefix == "/":
        raise ValueError(f"mount(path={path!r}): give the dashboard a path of its own, "
                         "such as '/scheduler/'")
    inner = app if app is not None else dashboard()

    async def router(scope: Scope, receive: Receive, send: Send) -> None:
        where = scope.get("path", "")
        if scope["type"] in ("http", "websocket") and (
                where == prefix or where.startswith(prefix + "/")):
            # As Starlette's Mount: the full path, with the prefix as the root path, so the
            # dashboard's links keep the prefix.
            scope = dict(scope, root_path=scope.get("root_path", "") + prefix)
            await inner(scope, receive, send)
            return
        await application(scope, receive, send)

    return router
