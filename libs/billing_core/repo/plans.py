"""The plan catalogue (read-only for the processes; migrations seed it)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from billing_core.db import tables as t
from billing_core.db.pg import Connection
from billing_core.domain.errors import DomainError


class PlanNotFound(DomainError):
    def __init__(self, code: str) -> None:
        super().__init__(f"unknown plan {code!r}")
        self.code = code


@dataclass(frozen=True)
class Plan:
    id: int
    code: str
    name: str
    price_amount: int
    currency: str
    billing_interval: str
    active: bool
    # Days of free trial a new subscription gets (0: none) unless it asks otherwise.
    trial_days: int = 0


_COLUMNS = (
    t.plan.c.id,
    t.plan.c.code,
    t.plan.c.name,
    t.plan.c.price_amount,
    t.plan.c.currency,
    t.plan.c.billing_interval,
    t.plan.c.active,
    t.plan.c.trial_days,
)


async def list_active(session: AsyncSession) -> list[Plan]:
    rows = await session.execute(
        select(*_COLUMNS).where(t.plan.c.active.is_(True)).order_by(t.plan.c.id)
    )
    return [Plan(**row) for row in rows.mappings()]


async def get_by_code(session: AsyncSession, code: str, *, active_only: bool = True) -> Plan:
    query = select(*_COLUMNS).where(t.plan.c.code == code)
    if active_only:
        query = query.where(t.plan.c.active.is_(True))
    row = (await session.execute(query)).mappings().first()
    if row is None:
        raise PlanNotFound(code)
    return Plan(**row)


_ACTIVE = (
    "SELECT id, code, name, price_amount, currency, billing_interval, active, trial_days "
    "FROM plan "
    "WHERE active ORDER BY id"
)


async def fetch_active(conn: Connection) -> list[Plan]:
    """:func:`list_active` on a driver connection."""
    return [Plan(*row) for row in await conn.fetch(_ACTIVE)]
