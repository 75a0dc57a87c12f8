"""Log a fault the scheduler survives once, at WARNING, and its recovery once, at INFO.

A database that is down for a minute must not produce sixty identical warnings.
"""

from __future__ import annotations

import logging


class FaultLog:
    """One per recurring activity (polling, heartbeats, the LISTEN connection…)."""

    def __init__(self, logger: logging.Logger | logging.LoggerAdapter[logging.Logger],
                 what: str) -> None:
        self._log = logger
        self._what = what
        self.failing = False
        self.failures = 0

    def failed(self, exc: BaseException) -> None:
        self.failures += 1
        if not self.failing:
            self.failing = True
            # One line for the operator; the traceback is for whoever turns on DEBUG.
            self._log.warning("%s failed: %s: %s (retrying)", self._what, type(exc).__name__,
                              str(exc).splitlines()[0] if str(exc) else "")
            self._log.debug("%s failed", self._what, exc_info=exc)
        else:
            self._log.debug("%s failed again: %r", self._what, exc)

    def ok(self) -> None:
        if self.failing:
            self.failing = False
            self._log.info("%s recovered after %d failure(s)", self._what, self.failures)
            self.failures = 0
