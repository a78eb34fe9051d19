"""Test data written straight with SQL (the same rows the services write), on a driver
connection, or inside a test's SQLAlchemy transaction (on that transaction's own driver
connection: :func:`driver_of`)."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from billing_core.db.arrays import int_array
from billing_core.db.pg import Connection, Statement, execute, fetch, fetchval


async def driver_of(conn: Connection | AsyncConnection) -> Connection:
    """The asyncpg connection under a test's SQLAlchemy connection, its transaction begun (the
    SQLAlchemy adapter begins lazily), so statements on it are part of that transaction."""
    if not isinstance(conn, AsyncConnection):
        return conn
    await conn.execute(text("SELECT 1"))
    raw = await conn.get_raw_connection()
    return raw.driver_connection


_PLAN_ID = Statement("SELECT id FROM plan WHERE code = :code")


async def plan_id(conn: Connection | AsyncConnection, code: str) -> int:
    conn = await driver_of(conn)
    return int(await fetchval(conn, _PLAN_ID, {"code": code}))


# Customers written straight with SQL take the ids the tests give them; the id sequence then
# moves past them, so a customer created through the API later gets a fresh id.
_ENSURE_CUSTOMERS = Statement(
    """
    INSERT INTO customer (id, external_id)
    SELECT id, id::text FROM unnest(CAST(:ids AS text)::bigint[]) AS id
    ON CONFLICT DO NOTHING
    """
)
_SEQUENCE_PAST_CUSTOMERS = Statement(
    """
    SELECT setval(pg_get_serial_sequence('customer', 'id'), top.id)
    FROM (SELECT max(id) AS id FROM customer) AS top, customer_id_seq AS seq
    WHERE top.id >= seq.last_value + CASE WHEN seq.is_called THEN 1 ELSE 0 END
    """
)


async def ensure_customers(conn: Connection | AsyncConnection, customer_ids: list[int]) -> None:
    """A customer row (external id: the number) for each of ``customer_ids`` that has none."""
    conn = await driver_of(conn)
    await execute(conn, _ENSURE_CUSTOMERS, {"ids": int_array(customer_ids)})
    await execute(conn, _SEQUENCE_PAST_CUSTOMERS)


_SUBSCRIPTION = Statement(
    """
    INSERT INTO subscription (customer_id, plan_id, status, time_zone,
        billing_anchor, period_index, current_period_start, current_period_end,
        credit_balance, created_at, updated_at)
    VALUES (:customer, :plan, :status, :tz, :start, 0, :start, :end, :credit,
            :start, :start)
    RETURNING id
    """
)


async def create_subscription(
    conn: Connection | AsyncConnection,
    *,
    customer_id: int,
    start: datetime,
    plan_code: str = "BASIC_MONTHLY",
    status: str = "ACTIVE",
    period_days: int = 30,
    time_zone: str = "UTC",
    credit_balance: int = 0,
) -> int:
    conn = await driver_of(conn)
    pid = await plan_id(conn, plan_code)
    await ensure_customers(conn, [customer_id])
    params = {
        "customer": customer_id,
        "plan": pid,
        "status": status,
        "tz": time_zone,
        "start": start,
        "end": start + timedelta(days=period_days),
        "credit": credit_balance,
    }
    return int(await fetchval(conn, _SUBSCRIPTION, params))


_INVOICE = Statement(
    """
    WITH inv AS (
        INSERT INTO invoice (subscription_id, customer_id, kind, period_index,
            period_start, period_end, subtotal, credit_applied, amount,
            currency, status, attempt_count, next_attempt_at)
        VALUES (:sub, :customer, :kind, :pidx, :ps, :pe, :amount, 0, :amount,
            :cur, :status, :attempts, :next)
        RETURNING id, amount, period_start, period_end
    ), line AS (
        INSERT INTO invoice_line (invoice_id, line_no, kind, description,
            quantity, unit_amount, amount, period_start, period_end)
        SELECT id, 1, 'PLAN_PERIOD', 'Subscription period', 1, amount, amount,
            period_start, period_end
        FROM inv
    )
    SELECT id FROM inv
    """
)


async def create_invoice(
    conn: Connection | AsyncConnection,
    *,
    subscription_id: int,
    customer_id: int,
    amount: int,
    next_attempt_at: datetime,
    period_start: datetime,
    currency: str = "EUR",
    kind: str = "RENEWAL",
    status: str = "OPEN",
    attempt_count: int = 0,
    period_index: int = 0,
) -> int:
    conn = await driver_of(conn)
    await ensure_customers(conn, [customer_id])
    params = {
        "sub": subscription_id,
        "customer": customer_id,
        "kind": kind,
        "pidx": period_index,
        "ps": period_start,
        "pe": period_start + timedelta(days=30),
        "amount": amount,
        "cur": currency,
        "status": status,
        "attempts": attempt_count,
        "next": next_attempt_at,
    }
    return int(await fetchval(conn, _INVOICE, params))


_DUE_WITH_INVOICES = Statement(
    """
    WITH p AS (SELECT id, CAST(:now AS timestamptz) AS now
               FROM plan WHERE code = 'BASIC_MONTHLY'),
    subs AS (
        INSERT INTO subscription (customer_id, plan_id, status, billing_anchor,
            current_period_start, current_period_end)
        SELECT CAST(:first AS bigint) + g, p.id, 'ACTIVE', p.now, p.now,
               p.now + interval '30 days'
        FROM generate_series(0, CAST(:n AS int) - 1) g, p
        RETURNING id, customer_id, current_period_start AS now
    ),
    inv AS (
        INSERT INTO invoice (subscription_id, customer_id, kind, period_index,
            period_start, period_end, subtotal, amount, currency, status,
            next_attempt_at)
        SELECT id, customer_id, 'RENEWAL', 0, now, now + interval '30 days',
               CAST(:amount AS bigint), CAST(:amount AS bigint), 'EUR', 'OPEN', now
        FROM subs
        RETURNING id, amount, period_start, period_end
    ),
    line AS (
        INSERT INTO invoice_line (invoice_id, line_no, kind, description, quantity,
            unit_amount, amount, period_start, period_end)
        SELECT id, 1, 'PLAN_PERIOD', 'Subscription period', 1, amount, amount,
               period_start, period_end
        FROM inv
    )
    SELECT id FROM inv ORDER BY id
    """
)


async def due_subscriptions_with_invoices(
    conn: Connection | AsyncConnection,
    n: int,
    *,
    now: datetime,
    amount: int = 990,
    first_customer: int = 1,
) -> list[int]:
    """``n`` subscriptions, each with one OPEN invoice due at ``now`` (set-based), of
    customers ``first_customer`` .. ``first_customer + n - 1``."""
    conn = await driver_of(conn)
    await ensure_customers(conn, list(range(first_customer, first_customer + n)))
    params = {"n": n, "now": now, "amount": amount, "first": first_customer}
    return [int(r["id"]) for r in await fetch(conn, _DUE_WITH_INVOICES, params)]
