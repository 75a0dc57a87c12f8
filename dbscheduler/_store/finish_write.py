"""The record of one execution's end that the finish writes (:mod:`.finish`, and the
dialect's strategy: :class:`~dbscheduler.dialects.finishing.FinishRow` is its shape there).

Its own module, below the store's writers, so that none imports another to name it.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime

from ..context import UNSET, Status, _Unset
from .history import RunRecord

__all__ = ["FinishWrite"]


@dataclasses.dataclass(frozen=True)
class FinishWrite:
    """The fenced write that ends one execution."""

    id: int
    token: int
    status: Status
    next_at: datetime
    attempt: int
    finished_at: datetime
    """The node's estimate of the database time at the finish (used to plan ``next_at``);
    the row's ``last_finished_at`` is the database's own clock at the write."""
    error: str | None = None
    """Written to ``last_error`` when set; a success keeps the last failure's text."""
    payload: str | _Unset | None = UNSET
    """New JSON state; ``UNSET`` keeps the stored one."""
    delete: bool = False
    """A one-off job that is done (succeeded or gave up): the fenced write deletes the row."""
    run: RunRecord | None = None
    """The execution's row in the run history, written with this finish when history is on."""
    keyed: bool = False
    """A batch key's delivery: its row is deleted only when nothing is queued for it, and
    otherwise kept, due when the queued items say (:mod:`dbscheduler._store.batches`)."""

    @property
    def sets_payload(self) -> bool:
        """The write replaces the stored state with :attr:`payload`."""
        return not isinstance(self.payload, _Unset)

