"""Task state and error text on their way to and from the table.

A value the database would refuse for one row (a state larger than every dialect's payload
column holds, a NUL character PostgreSQL rejects in text, a lone surrogate no driver can
encode) is dealt with here, before the write, so it can only ever fail its own execution.
"""

from __future__ import annotations

import json
from typing import Any

from ..table import MAX_ERROR_LENGTH, MAX_STATE_BYTES

__all__ = ["MAX_STATE_BYTES", "clean_text", "decode_state", "decode_state_safe", "encode_state"]

_ENCODER = json.JSONEncoder(allow_nan=False)
"""``json.dumps(…, allow_nan=False)``'s encoder, made once: ``dumps`` with an argument makes
a new one per call (a tenth of a bulk call's CPU)."""


def encode_state(state: Any) -> str | None:
    """``state`` as the JSON text stored in ``payload`` (``None`` stays ``None``).

    Raises ``ValueError`` with the reason when it cannot be stored: not JSON-serialisable,
    nested too deeply to serialise, or larger than :data:`MAX_STATE_BYTES` of UTF-8.
    """
    if state is None:
        return None
    try:
        text = _ENCODER.encode(state)
    except RecursionError:
        raise ValueError("state is nested too deeply to serialise as JSON") from None
    except (TypeError, ValueError) as exc:
        raise ValueError(f"state is not JSON-serialisable: {exc}") from None
    size = len(text)  # ASCII (ensure_ascii): one byte per character
    if size > MAX_STATE_BYTES:
        raise ValueError(
            f"state is {size:,} bytes of JSON; the limit is {MAX_STATE_BYTES:,} bytes "
            "(dbscheduler.table.MAX_STATE_BYTES)"
        )
    return text


def decode_state(payload: str | None) -> Any:
    """The stored ``payload`` as Python (JSON), ``None`` when empty; raises on bad JSON."""
    return None if payload is None else json.loads(payload)


def decode_state_safe(payload: str | None) -> tuple[Any, str | None]:
    """``(state, None)``, or ``(None, reason)`` when the stored text is not valid JSON (a row
    written by hand or by other software): reading a table never fails because of one row."""
    try:
        return decode_state(payload), None
    except (ValueError, RecursionError) as exc:
        return None, f"stored state is not valid JSON: {exc}"[:MAX_ERROR_LENGTH]


def clean_text(text: str | None, limit: int = MAX_ERROR_LENGTH) -> str | None:
    """Error text every database stores: NUL (refused by PostgreSQL) and lone surrogates
    (which no driver can encode) are written as escapes, and the length is capped."""
    if text is None:
        return None
    cleaned = text.replace("\x00", "\\x00")
    cleaned = cleaned.encode("utf-8", "backslashreplace").decode("utf-8")
    if len(cleaned) > limit:
        cleaned = cleaned[: limit - 1] + "…"
    return cleaned
