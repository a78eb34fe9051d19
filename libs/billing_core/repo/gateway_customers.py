"""``gateway_customer``: which gateway customer and payment method charge one of our customers."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import literal_column, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from billing_core.db import tables as t

_g = t.gateway_customer


@dataclass(frozen=True)
class GatewayCustomer:
    customer_id: int
    gateway: str
    gateway_customer_id: str
    payment_method_id: str
    created_at: datetime
    updated_at: datetime


async def get(db: AsyncSession | AsyncConnection, customer_id: int) -> GatewayCustomer | None:
    row = (await db.execute(select(_g).where(_g.c.customer_id == customer_id))).mappings().first()
    return None if row is None else GatewayCustomer(**row)


async def put(
    db: AsyncSession | AsyncConnection,
    *,
    customer_id: int,
    gateway: str,
    gateway_customer_id: str,
    payment_method_id: str,
    now: datetime,
) -> tuple[GatewayCustomer, bool]:
    """Set the customer's gateway customer and default payment method; True when it is new."""
    statement = insert(_g).values(
        customer_id=customer_id,
        gateway=gateway,
        gateway_customer_id=gateway_customer_id,
        payment_method_id=payment_method_id,
        created_at=now,
        updated_at=now,
    )
    upsert = statement.on_conflict_do_update(
        index_elements=[_g.c.customer_id],
        set_={
            "gateway": statement.excluded.gateway,
            "gateway_customer_id": statement.excluded.gateway_customer_id,
            "payment_method_id": statement.excluded.payment_method_id,
            "updated_at": statement.excluded.updated_at,
        },
        # xmax is 0 on a row version written by an INSERT, not by the ON CONFLICT update.
    ).returning(*_g.c, literal_column("(xmax = 0)").label("created"))
    row = (await db.execute(upsert)).mappings().one()
    values = {k: v for k, v in row.items() if k != "created"}
    return GatewayCustomer(**values), bool(row["created"])
