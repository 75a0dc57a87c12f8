"""The engine's private access to the table: connections and clock (``base``), registration,
and the fenced hot path. Operations for users live in :mod:`dbscheduler.client`."""

from .base import StoreBase, refuse_reserved, validate_name
from .finish import FinishWrite
from .history import PRUNE_BATCH, RunRecord, prune_beyond, prune_older, select_runs
from .hotpath import Picked, PollState, Store
from .registration import Registration, register
from .runtime import RuntimeRow, write_runtime
from .state import MAX_STATE_BYTES, clean_text, decode_state, decode_state_safe, encode_state

__all__ = [
    "MAX_STATE_BYTES",
    "PRUNE_BATCH",
    "FinishWrite",
    "Picked",
    "PollState",
    "Registration",
    "RunRecord",
    "RuntimeRow",
    "Store",
    "StoreBase",
    "clean_text",
    "decode_state",
    "decode_state_safe",
    "encode_state",
    "prune_beyond",
    "prune_older",
    "refuse_reserved",
    "register",
    "select_runs",
    "validate_name",
    "write_runtime",
]
