"""Invoices as the API creates, voids and lists them (the renewer and collector own the rest)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from billing_core.db import tables as t
from billing_core.domain import invoice as invoice_rules
from billing_core.domain.invoice import InvoiceStatus

Db = AsyncSession | AsyncConnection


@dataclass(frozen=True)
class Invoice:
    id: int
    subscription_id: int
    customer_id: int
    kind: str
    period_index: int
    period_start: datetime
    period_end: datetime
    subtotal: int
    credit_applied: int
    amount: int
    currency: str
    status: str
    attempt_count: int
    next_attempt_at: datetime | None
    paid_at: datetime | None
    closed_at: datetime | None
    created_at: datetime


@dataclass(frozen=True)
class VoidedInvoice:
    id: int
    amount: int
    credit_applied: int
    currency: str


_i = t.invoice
_COLUMNS = (
    _i.c.id,
    _i.c.subscription_id,
    _i.c.customer_id,
    _i.c.kind,
    _i.c.period_index,
    _i.c.period_start,
    _i.c.period_end,
    _i.c.subtotal,
    _i.c.credit_applied,
    _i.c.amount,
    _i.c.currency,
    _i.c.status,
    _i.c.attempt_count,
    _i.c.next_attempt_at,
    _i.c.paid_at,
    _i.c.closed_at,
    _i.c.created_at,
)


async def insert_invoice(
    session: AsyncSession,
    *,
    subscription_id: int,
    customer_id: int,
    kind: str,
    period_index: int,
    period_start: datetime,
    period_end: datetime,
    subtotal: int,
    credit_applied: int,
    currency: str,
    now: datetime,
) -> Invoice:
    """Insert an invoice; OPEN and due now, or PAID at once when credit covers all of it."""
    amount = subtotal - credit_applied
    start = invoice_rules.opening(amount, now)
    result = await session.execute(
        insert(_i)
        .values(
            subscription_id=subscription_id,
            customer_id=customer_id,
            kind=kind,
            period_index=period_index,
            period_start=period_start,
            period_end=period_end,
            subtotal=subtotal,
            credit_applied=credit_applied,
            amount=amount,
            currency=currency,
            status=str(start.status),
            attempt_count=0,
            next_attempt_at=start.next_attempt_at,
            paid_at=start.paid_at,
            closed_at=start.paid_at,
            created_at=now,
            updated_at=now,
        )
        .returning(*_COLUMNS)
    )
    return Invoice(**result.mappings().one())


async def void_open_invoices(
    session: Db, subscription_id: int, *, now: datetime, keep_invoice_id: int | None = None
) -> list[VoidedInvoice]:
    """VOID every OPEN invoice of the subscription but ``keep_invoice_id`` (the state
    ``domain.invoice.void`` gives: no next attempt, closed now, and no lease left)."""
    query = update(_i).where(
        _i.c.subscription_id == subscription_id, _i.c.status == str(InvoiceStatus.OPEN)
    )
    if keep_invoice_id is not None:
        query = query.where(_i.c.id != keep_invoice_id)
    result = await session.execute(
        query.values(
            status=str(InvoiceStatus.VOID),
            next_attempt_at=None,
            leased_at=None,
            closed_at=now,
            updated_at=now,
        ).returning(_i.c.id, _i.c.amount, _i.c.credit_applied, _i.c.currency)
    )
    return sorted((VoidedInvoice(**row) for row in result.mappings()), key=lambda v: v.id)


async def list_for_subscription(
    session: AsyncSession,
    subscription_id: int,
    *,
    limit: int,
    before_id: int | None = None,
    offset: int = 0,
) -> list[Invoice]:
    """Newest first (by id). Keyset pagination with ``before_id``; ``offset`` also works."""
    query = select(*_COLUMNS).where(_i.c.subscription_id == subscription_id)
    if before_id is not None:
        query = query.where(_i.c.id < before_id)
    query = query.order_by(_i.c.id.desc()).limit(limit).offset(offset)
    return [Invoice(**row) for row in (await session.execute(query)).mappings()]
