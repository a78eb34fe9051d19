"""``customer``: create, read and page through customers, and page through a customer's (or
any) subscriptions. Functions take a session or connection and never commit."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from functools import cache

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from billing_core.db import pg
from billing_core.db import tables as t
from billing_core.db.pg import Statement
from billing_core.domain.errors import DomainError
from billing_core.repo import subscriptions as subscriptions_repo

Db = AsyncSession | AsyncConnection

_c = t.customer


class CustomerNotFound(DomainError):
    def __init__(self, customer_id: int) -> None:
        super().__init__(f"customer {customer_id} not found")
        self.customer_id = customer_id


class CustomerExists(DomainError):
    """Another customer already has this external id."""

    def __init__(self, external_id: str, customer_id: int) -> None:
        super().__init__(f"customer {customer_id} already has externalId {external_id!r}")
        self.external_id = external_id
        self.customer_id = customer_id


@dataclass(frozen=True)
class Customer:
    id: int
    external_id: str
    email: str | None
    name: str | None
    time_zone: str
    currency: str | None
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class NewCustomer:
    external_id: str
    email: str | None
    name: str | None
    time_zone: str
    currency: str | None


async def insert_customer(db: Db, new: NewCustomer, *, now: datetime) -> Customer:
    """Insert ``new``; :class:`CustomerExists` when its external id is taken (nothing written,
    the transaction stays usable)."""
    statement = (
        insert(_c)
        .values(
            external_id=new.external_id,
            email=new.email,
            name=new.name,
            time_zone=new.time_zone,
            currency=new.currency,
            created_at=now,
            updated_at=now,
        )
        .on_conflict_do_nothing(index_elements=[_c.c.external_id])
        .returning(*_c.c)
    )
    row = (await db.execute(statement)).mappings().first()
    if row is None:
        existing = await get_by_external_id(db, new.external_id)
        raise CustomerExists(new.external_id, existing.id if existing else 0)
    return Customer(**row)


async def get(db: Db, customer_id: int) -> Customer:
    row = (await db.execute(select(_c).where(_c.c.id == customer_id))).mappings().first()
    if row is None:
        raise CustomerNotFound(customer_id)
    return Customer(**row)


async def get_by_external_id(db: Db, external_id: str) -> Customer | None:
    row = (await db.execute(select(_c).where(_c.c.external_id == external_id))).mappings().first()
    return None if row is None else Customer(**row)


async def page(db: Db, *, limit: int, before_id: int | None = None) -> list[Customer]:
    """Up to ``limit`` customers, newest (highest id) first, below ``before_id`` if given."""
    query = select(_c).order_by(_c.c.id.desc()).limit(limit)
    if before_id is not None:
        query = query.where(_c.c.id < before_id)
    return [Customer(**row) for row in (await db.execute(query)).mappings()]


@cache
def _subscriptions_page(customer: bool, status: bool, before: bool) -> Statement:
    where = [
        *(["s.customer_id = :customer_id"] if customer else []),
        *(["s.status = :status"] if status else []),
        *(["s.id < :before_id"] if before else []),
    ]
    conditions = f" WHERE {' AND '.join(where)}" if where else ""
    return Statement(f"{subscriptions_repo.SELECT_SQL}{conditions} ORDER BY s.id DESC LIMIT :limit")


async def subscriptions_page(
    db: Db,
    *,
    limit: int,
    customer_id: int | None = None,
    status: str | None = None,
    before_id: int | None = None,
) -> list[subscriptions_repo.Subscription]:
    """Up to ``limit`` subscriptions (with their plan), newest first, optionally only one
    customer's and/or in one status, below ``before_id`` if given."""
    filters = {"customer_id": customer_id, "status": status, "before_id": before_id}
    statement = _subscriptions_page(*(value is not None for value in filters.values()))
    params = {name: value for name, value in filters.items() if value is not None}
    rows = await pg.fetch(db, statement, {**params, "limit": limit})
    return [subscriptions_repo.Subscription(**row) for row in rows]
