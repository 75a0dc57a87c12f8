"""Values on their way to the table, checked before any write (no database needed)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from dbscheduler._store import clean_text, decode_state_safe, encode_state
from dbscheduler.dialects import IDLE_TRANSACTION_FLOOR, engine_options, idle_transaction_timeout
from dbscheduler.dialects.pg_sessions import session_settings
from dbscheduler.dialects.sessions import postgresql_options_names
from dbscheduler.table import MAX_ERROR_LENGTH, MAX_STATE_BYTES


def test_a_state_over_the_limit_is_refused_with_its_size() -> None:
    at_limit = encode_state("x" * (MAX_STATE_BYTES - 2))  # with its two quotes: the limit
    assert at_limit is not None and len(at_limit) == MAX_STATE_BYTES
    with pytest.raises(ValueError, match=r"state is 1,048,579 bytes of JSON; the limit is "
                                         r"1,048,576 bytes"):
        encode_state("x" * (MAX_STATE_BYTES + 1))


def test_unstorable_states_are_value_errors_saying_why() -> None:
    nested: Any = []
    for _ in range(100_000):
        nested = [nested]
    with pytest.raises(ValueError, match="nested too deeply"):
        encode_state(nested)
    with pytest.raises(ValueError, match="not JSON-serialisable"):
        encode_state({"when": object()})
    with pytest.raises(ValueError, match="not JSON-serialisable"):
        encode_state(float("nan"))
    assert encode_state(None) is None
    assert encode_state({"s": "\x00\ud800"}) == '{"s": "\\u0000\\ud800"}'  # escaped in JSON


def test_error_text_is_made_storable() -> None:
    assert clean_text("a\x00b\ud800c") == "a\\x00b\\ud800c"
    assert clean_text(None) is None
    long = clean_text("x" * (MAX_ERROR_LENGTH + 10))
    assert long is not None and len(long) == MAX_ERROR_LENGTH and long.endswith("…")


def test_a_stored_state_that_is_not_json_is_reported_not_raised() -> None:
    assert decode_state_safe('{"n": 1}') == ({"n": 1}, None)
    assert decode_state_safe(None) == (None, None)
    value, error = decode_state_safe("{nope")
    assert value is None and error is not None and error.startswith("stored state is not valid")


def test_idle_transaction_bound_follows_the_lease_with_a_floor_and_a_cap() -> None:
    assert idle_transaction_timeout(timedelta(seconds=30)) == timedelta(seconds=5)
    assert idle_transaction_timeout(timedelta(seconds=3)) == IDLE_TRANSACTION_FLOOR
    assert idle_transaction_timeout(timedelta(minutes=10)) == timedelta(seconds=10)
    settings = session_settings(timedelta(seconds=30))
    assert settings["idle_in_transaction_session_timeout"] == "5000"
    assert engine_options("mysql", timedelta(seconds=30))["isolation_level"] == "AUTOCOMMIT"


def test_what_the_url_says_wins_over_the_engine_defaults() -> None:
    lease = timedelta(seconds=30)
    pg = engine_options("postgresql", lease, make_url(
        "postgresql+psycopg://h/db?connect_timeout=3&keepalives_idle=60"))["connect_args"]
    assert "connect_timeout" not in pg and "keepalives_idle" not in pg
    assert pg["keepalives"] == 1
    # No libpq "options" startup parameter at all: PgBouncer refuses it.
    assert "options" not in engine_options("postgresql", lease)["connect_args"]
    my = engine_options("mysql", lease, make_url(
        "mysql+pymysql://h/db?read_timeout=7"))["connect_args"]
    assert "read_timeout" not in my and my["connect_timeout"] == 10
    assert postgresql_options_names(make_url(
        "postgresql://h/db?options=-c%20jit%3Don%20--statement-timeout%3D5s"
    )) == {"jit", "statement_timeout"}
    assert postgresql_options_names(make_url("postgresql://h/db")) == frozenset()


def test_mysql_connect_arguments_suit_both_drivers() -> None:
    lease = timedelta(seconds=10)
    my = engine_options("mysql", lease, make_url("mysql+pymysql://h/db"))["connect_args"]
    # Whole seconds: mysqlclient refuses a float timeout.
    assert isinstance(my["read_timeout"], int) and isinstance(my["write_timeout"], int)
    assert "conv" not in my, "PyMySQL keeps its own conversions"
    pytest.importorskip("MySQLdb", reason="mysqlclient is not installed")
    c = engine_options("mysql", lease, make_url("mysql+mysqldb://h/db"))["connect_args"]
    from MySQLdb.constants import FIELD_TYPE

    # A zero date comes back as its text (unreadable), not as None.
    assert c["conv"][FIELD_TYPE.DATETIME](b"0000-00-00 00:00:00") == "0000-00-00 00:00:00"
    assert c["conv"][FIELD_TYPE.DATETIME](b"2026-01-02 03:04:05.5").microsecond == 500000
