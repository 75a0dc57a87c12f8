"""``ctx.fenced`` against each real database, one process: what it commits and what it refuses.

The execution's row is written by hand (held by a node, a token, a claim, a lease running out
at a chosen time), so each refusal is seen alone: another claim (a token that came back after
a failover), a lease that ends within the final check's margin, a row taken over while the
block ran. The freeze tests (``tests/chaos/test_fenced_freeze.py``) stop real nodes inside it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from dbscheduler import LeaseLost
from dbscheduler._engine.fencing import Fence, bounds_for, fenced
from dbscheduler.dialects import dialect_for
from dbscheduler.dialects.base import db_now, db_now_plus
from dbscheduler.table import make_table

NODE = "node-a"
CLAIM = "c" * 32
LEASE = 3.0


Rig = tuple[sa.Engine, sa.Table, sa.Table, int]
"""An engine, the scheduler table, the business table, and the id of the execution's row."""


@pytest.fixture
def rig(migrated: tuple[str, str]) -> Iterator[Rig]:
    url, table_name = migrated
    engine = sa.create_engine(url)
    table = make_table(table_name)
    effects = sa.Table(f"{table_name}_fx", sa.MetaData(), sa.Column("token", sa.Integer))
    effects.create(engine)
    with engine.begin() as conn:
        id_ = conn.execute(sa.insert(table).values(
            queue_name="pay", handler="pay", schedule="FixedRate(60)",
            next_process_at=db_now_plus(LEASE), created_at=db_now(), total_attempt=7, attempt=1,
            locked_by=NODE,
            claim=CLAIM,
        ).returning(table.c.id)).scalar_one()
    try:
        yield engine, table, effects, id_
    finally:
        effects.drop(engine)
        engine.dispose()


def _fence(id_: int, table: sa.Table, *, claim: str = CLAIM, token: int = 7) -> Fence:
    return Fence(table.name, id_, token, NODE, "pay", claim=claim, lease=LEASE)


def _written(engine: sa.Engine, effects: sa.Table) -> list[int]:
    with engine.connect() as conn:
        return [r[0] for r in conn.execute(sa.select(effects.c.token))]


def test_a_fenced_transaction_commits_while_the_lease_holds(rig: Rig) -> None:
    engine, table, effects, id_ = rig
    with fenced(_fence(id_, table), engine) as conn:
        conn.execute(effects.insert().values(token=7))
    assert _written(engine, effects) == [7]


def test_a_token_that_came_back_with_another_claim_is_refused(rig: Rig) -> None:
    engine, table, effects, id_ = rig
    with pytest.raises(LeaseLost), fenced(_fence(id_, table, claim="z" * 32), engine) as conn:
        conn.execute(effects.insert().values(token=7))
    assert _written(engine, effects) == []


def test_a_lease_ending_within_the_margin_is_refused_at_commit(rig: Rig) -> None:
    engine, table, effects, id_ = rig
    dialect = dialect_for(engine)
    with engine.connect() as c:
        margin = dialect.fence_margin(c, bounds_for(LEASE))
    # Once the first check has passed, the lease is made to end within the margin the final
    # check demands (any time short of it: the database's now only grows until the commit).
    # Shortened before the block, a loaded machine reached the first check after the lease
    # was over (even at 0.95 of the margin), and the refusal came there instead.
    with pytest.raises(LeaseLost, match="at commit"), \
            fenced(_fence(id_, table), engine) as conn:
        with engine.begin() as other:
            other.execute(sa.update(table).where(table.c.id == id_)
                          .values(next_process_at=db_now_plus(margin * 0.5)))
        conn.execute(effects.insert().values(token=7))
    assert _written(engine, effects) == []


def test_a_row_taken_over_during_the_block_is_refused(rig: Rig) -> None:
    engine, table, effects, id_ = rig
    with pytest.raises(LeaseLost, match="at commit"), \
            fenced(_fence(id_, table), engine) as conn:
        with engine.begin() as other:  # another node's pick: its token, node and claim
            other.execute(sa.update(table).where(table.c.id == id_).values(
                total_attempt=8, locked_by="node-b", claim="b" * 32,
                next_process_at=db_now_plus(LEASE)))
        conn.execute(effects.insert().values(token=7))
    assert _written(engine, effects) == []
