"""Linking an execution to the trace that triggered it, without the engine knowing tracing.

``trigger()`` asks the provider installed here (``dbscheduler.tracing`` installs one) for the
calling context's W3C ``traceparent`` and stores it with the fencing token of the execution it
makes due. That execution — and no later one — gets it as ``ctx.triggered_by``.
"""

from __future__ import annotations

from collections.abc import Callable

from ..table import TRIGGER_LINK_LENGTH

Provider = Callable[[], "str | None"]
_provider: Provider | None = None


def install(provider: Provider | None) -> None:
    """Make ``trigger()`` in this process ask ``provider`` for the caller's trace context
    (``None``: stop linking)."""
    global _provider
    _provider = provider


def current() -> str | None:
    """The calling context's ``traceparent``, when a provider is installed and gives one
    that fits the column; never raises (a trigger must not fail because of tracing)."""
    provider = _provider
    if provider is None:
        return None
    try:
        parent = provider()
    except Exception:
        return None
    if not parent or " " in parent or len(parent) > TRIGGER_LINK_LENGTH - 21:
        return None
    return parent


def for_token(stored: str | None, token: int) -> str | None:
    """The ``traceparent`` of a stored ``"<traceparent> <token>"`` when it was written for
    execution ``token``, else ``None``.

    >>> for_token("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01 8", 8)
    '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'
    >>> for_token("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01 8", 9) is None
    True
    """
    if not stored:
        return None
    parent, _, written_for = stored.rpartition(" ")
    return parent if parent and written_for == str(token) else None
