"""How long the scenarios run: the short form (default, CI) or the long one (--chaos-long)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Profile:
    """``short`` (default) or ``long`` (``pytest --chaos-long``)."""

    long: bool

    @property
    def name(self) -> str:
        return "long" if self.long else "short"

    def pick(self, short: float, long: float) -> float:
        return long if self.long else short

    def count(self, short: int, long: int) -> int:
        return long if self.long else short
