"""``customer``: create, read and page through customers, and page through a customer's (or
any) subscriptions. Functions take a session or connection and never commit."""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from itertools import product

from billing_core.db import pg
from billing_core.db.pg import Connection, Statement
from billing_core.domain.errors import DomainError
from billing_core.repo import subscriptions as subscriptions_repo


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


_COLUMNS = ", ".join(f.name for f in fields(Customer))

_INSERT = Statement(
    f"""
    INSERT INTO customer (external_id, email, name, time_zone, currency, created_at, updated_at)
    VALUES (:external_id, :email, :name, :time_zone, :currency, :now, :now)
    ON CONFLICT (external_id) DO NOTHING
    RETURNING {_COLUMNS}
    """
)
_GET = Statement(f"SELECT {_COLUMNS} FROM customer WHERE id = :id")
_GET_BY_EXTERNAL_ID = Statement(f"SELECT {_COLUMNS} FROM customer WHERE external_id = :external_id")
_PAGE = Statement(f"SELECT {_COLUMNS} FROM customer ORDER BY id DESC LIMIT :limit")
_PAGE_BEFORE = Statement(
    f"SELECT {_COLUMNS} FROM customer WHERE id < :before_id ORDER BY id DESC LIMIT :limit"
)


async def insert_customer(conn: Connection, new: NewCustomer, *, now: datetime) -> Customer:
    """Insert ``new``; :class:`CustomerExists` when its external id is taken (nothing written,
    the transaction stays usable)."""
    row = await pg.fetchrow(
        conn,
        _INSERT,
        {
            "external_id": new.external_id,
            "email": new.email,
            "name": new.name,
            "time_zone": new.time_zone,
            "currency": new.currency,
            "now": now,
        },
    )
    if row is None:
        existing = await get_by_external_id(conn, new.external_id)
        raise CustomerExists(new.external_id, existing.id if existing else 0)
    return Customer(**row)


async def get(conn: Connection, customer_id: int) -> Customer:
    row = await pg.fetchrow(conn, _GET, {"id": customer_id})
    if row is None:
        raise CustomerNotFound(customer_id)
    return Customer(**row)


async def get_by_external_id(conn: Connection, external_id: str) -> Customer | None:
    row = await pg.fetchrow(conn, _GET_BY_EXTERNAL_ID, {"external_id": external_id})
    return None if row is None else Customer(**row)


async def page(conn: Connection, *, limit: int, before_id: int | None = None) -> list[Customer]:
    """Up to ``limit`` customers, newest (highest id) first, below ``before_id`` if given."""
    if before_id is None:
        rows = await pg.fetch(conn, _PAGE, {"limit": limit})
    else:
        rows = await pg.fetch(conn, _PAGE_BEFORE, {"limit": limit, "before_id": before_id})
    return [Customer(**row) for row in rows]


_SUBSCRIPTION_FILTERS = (
    "s.customer_id = :customer_id",
    "s.status = :status",
    "s.id < :before_id",
)


def _subscriptions_page(filters: tuple[bool, ...]) -> Statement:
    """The page of subscriptions under the filters chosen (in :data:`_SUBSCRIPTION_FILTERS`
    order): one statement per choice, so that each plan uses the indexes it can."""
    where = " AND ".join(c for c, on in zip(_SUBSCRIPTION_FILTERS, filters, strict=True) if on)
    return Statement(
        f"""
        {subscriptions_repo.SELECT_SQL}
        {f"WHERE {where}" if where else ""}
        ORDER BY s.id DESC
        LIMIT :limit
        """
    )


_SUBSCRIPTIONS_PAGES = {
    filters: _subscriptions_page(filters)
    for filters in product((False, True), repeat=len(_SUBSCRIPTION_FILTERS))
}


async def subscriptions_page(
    conn: Connection,
    *,
    limit: int,
    customer_id: int | None = None,
    status: str | None = None,
    before_id: int | None = None,
) -> list[subscriptions_repo.Subscription]:
    """Up to ``limit`` subscriptions (with their plan), newest first, optionally only one
    customer's and/or in one status, below ``before_id`` if given."""
    given = {"customer_id": customer_id, "status": status, "before_id": before_id}
    statement = _SUBSCRIPTIONS_PAGES[tuple(v is not None for v in given.values())]
    params = {name: v for name, v in given.items() if v is not None}
    rows = await pg.fetch(conn, statement, {"limit": limit, **params})
    return [subscriptions_repo.Subscription(**row) for row in rows]
