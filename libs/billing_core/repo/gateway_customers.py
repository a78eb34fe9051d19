"""``gateway_customer``: which gateway customer and payment method charge one of our customers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from billing_core.db.pg import Connection, Statement, fetch, fetchrow


@dataclass(frozen=True)
class GatewayCustomer:
    customer_id: int
    gateway: str
    gateway_customer_id: str
    payment_method_id: str
    created_at: datetime
    updated_at: datetime


_COLUMNS = "customer_id, gateway, gateway_customer_id, payment_method_id, created_at, updated_at"

_GET = Statement(f"SELECT {_COLUMNS} FROM gateway_customer WHERE customer_id = :customer_id")

# xmax is 0 on a row version written by an INSERT, not by the ON CONFLICT update.
_PUT = Statement(
    f"""
    INSERT INTO gateway_customer ({_COLUMNS})
    VALUES (:customer_id, :gateway, :gateway_customer_id, :payment_method_id, :now, :now)
    ON CONFLICT (customer_id) DO UPDATE
    SET gateway = excluded.gateway, gateway_customer_id = excluded.gateway_customer_id,
        payment_method_id = excluded.payment_method_id, updated_at = excluded.updated_at
    RETURNING {_COLUMNS}, (xmax = 0) AS created
    """
)


async def get(conn: Connection, customer_id: int) -> GatewayCustomer | None:
    row = await fetchrow(conn, _GET, {"customer_id": customer_id})
    return None if row is None else _customer(row)


async def put(
    conn: Connection,
    *,
    customer_id: int,
    gateway: str,
    gateway_customer_id: str,
    payment_method_id: str,
    now: datetime,
) -> tuple[GatewayCustomer, bool]:
    """Set the customer's gateway customer and default payment method; True when it is new."""
    (row,) = await fetch(
        conn,
        _PUT,
        {
            "customer_id": customer_id,
            "gateway": gateway,
            "gateway_customer_id": gateway_customer_id,
            "payment_method_id": payment_method_id,
            "now": now,
        },
    )
    return _customer(row), bool(row["created"])


def _customer(row: Mapping[Any, Any]) -> GatewayCustomer:
    return GatewayCustomer(
        customer_id=int(row["customer_id"]),
        gateway=str(row["gateway"]),
        gateway_customer_id=str(row["gateway_customer_id"]),
        payment_method_id=str(row["payment_method_id"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )
