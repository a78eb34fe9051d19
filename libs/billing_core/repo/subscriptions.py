"""Subscriptions: insert, read (with the plan), and version-checked updates.

Every write bumps ``version``. API writes are optimistic: they read a version, decide, and write
with ``WHERE id = :id AND version = :expected``; when another transaction (the renewer, the
collector, another request) committed first, no row matches and :class:`VersionConflict` tells
the caller the current version instead of overwriting that work.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

import asyncpg  # type: ignore[import-untyped]
from sqlalchemy import insert, select, text, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from billing_core.db import tables as t
from billing_core.db.pg import Connection
from billing_core.domain.errors import DomainError
from billing_core.domain.events import DomainEvent
from billing_core.domain.invoice_lines import InvoiceLine
from billing_core.domain.subscription import (
    Pause,
    PauseBehavior,
    SubscriptionState,
    SubscriptionStatus,
    change_instant,
)
from billing_core.repo import audit, idempotency
from billing_core.repo.invoices import Invoice


class SubscriptionNotFound(DomainError):
    def __init__(self, subscription_id: int) -> None:
        super().__init__(f"subscription {subscription_id} not found")
        self.subscription_id = subscription_id


class UnknownCustomer(DomainError):
    """A new subscription names a customer id that has no customer row."""

    def __init__(self, customer_id: int) -> None:
        super().__init__(
            f"customer {customer_id} does not exist: create it first (POST /customers)"
        )
        self.customer_id = customer_id


# The foreign keys a new subscription's statement meets when its customer does not exist.
_CUSTOMER_FOREIGN_KEYS = frozenset(
    {"fk_subscription_customer_id_customer", "fk_invoice_customer_id_customer"}
)


class VersionConflict(DomainError):
    def __init__(self, subscription_id: int, expected: int, current: int) -> None:
        super().__init__(
            f"subscription {subscription_id} is at version {current}, not {expected}: "
            "re-read it and retry"
        )
        self.subscription_id = subscription_id
        self.expected_version = expected
        self.current_version = current


@dataclass(frozen=True)
class Subscription:
    id: int
    customer_id: int
    status: str
    time_zone: str
    billing_anchor: datetime
    period_index: int
    current_period_start: datetime
    current_period_end: datetime
    cancel_at_period_end: bool
    canceled_at: datetime | None
    credit_balance: int
    version: int
    created_at: datetime
    updated_at: datetime
    plan_id: int
    plan_code: str
    plan_name: str
    plan_price_amount: int
    plan_currency: str
    plan_interval: str
    trial_end: datetime | None = None
    pause_behavior: str | None = None
    paused_at: datetime | None = None
    pause_resumes_at: datetime | None = None
    # A plan change scheduled for the period end: its plan (null: none).
    scheduled_plan_code: str | None = None
    scheduled_plan_price_amount: int | None = None
    scheduled_plan_interval: str | None = None
    # The index of the period that starts at billing_anchor (0 until an anchor moved).
    anchor_period_index: int = 0


def _pause(row: Mapping[Any, Any]) -> Pause | None:
    behavior = row.get("pause_behavior")
    if behavior is None:
        return None
    return Pause(PauseBehavior(behavior), row["paused_at"], row.get("pause_resumes_at"))


def pause_values(pause: Pause | None) -> dict[str, Any]:
    """The columns that hold ``pause`` (all null: not paused)."""
    if pause is None:
        return {"pause_behavior": None, "paused_at": None, "pause_resumes_at": None}
    return {
        "pause_behavior": str(pause.behavior),
        "paused_at": pause.paused_at,
        "pause_resumes_at": pause.resumes_at,
    }


def subscription_state(row: Mapping[Any, Any]) -> SubscriptionState:
    """The domain's view of a subscription row (columns by name, the plan's code as
    ``plan_code``): the one place a row becomes a :class:`SubscriptionState`."""
    return SubscriptionState(
        id=int(row["id"]),
        status=SubscriptionStatus(row["status"]),
        cancel_at_period_end=bool(row["cancel_at_period_end"]),
        plan_code=str(row["plan_code"]),
        version=int(row["version"]),
        canceled_at=row.get("canceled_at"),
        pause=_pause(row),
        scheduled_plan_code=row.get("scheduled_plan_code"),
    )


def domain_state(sub: Subscription) -> SubscriptionState:
    return subscription_state(vars(sub))


_s = t.subscription
_p = t.plan
_sp = t.plan.alias("scheduled_plan")
_SELECT = select(
    _s.c.id,
    _s.c.customer_id,
    _s.c.status,
    _s.c.time_zone,
    _s.c.billing_anchor,
    _s.c.period_index,
    _s.c.current_period_start,
    _s.c.current_period_end,
    _s.c.cancel_at_period_end,
    _s.c.canceled_at,
    _s.c.credit_balance,
    _s.c.version,
    _s.c.created_at,
    _s.c.updated_at,
    _p.c.id.label("plan_id"),
    _p.c.code.label("plan_code"),
    _p.c.name.label("plan_name"),
    _p.c.price_amount.label("plan_price_amount"),
    _p.c.currency.label("plan_currency"),
    _p.c.billing_interval.label("plan_interval"),
    _s.c.trial_end,
    _s.c.pause_behavior,
    _s.c.paused_at,
    _s.c.pause_resumes_at,
    _sp.c.code.label("scheduled_plan_code"),
    _sp.c.price_amount.label("scheduled_plan_price_amount"),
    _sp.c.billing_interval.label("scheduled_plan_interval"),
    _s.c.anchor_period_index,
).select_from(
    _s.join(_p, _p.c.id == _s.c.plan_id).outerjoin(_sp, _sp.c.id == _s.c.scheduled_plan_id)
)
# Subscriptions with their plan, as :class:`Subscription` rows (add WHERE / ORDER BY to it).
SELECT = _SELECT


_PLAN_COLUMNS = {
    "plan_id": "p.id",
    "plan_code": "p.code",
    "plan_name": "p.name",
    "plan_price_amount": "p.price_amount",
    "plan_currency": "p.currency",
    "plan_interval": "p.billing_interval",
    "scheduled_plan_code": "sp.code",
    "scheduled_plan_price_amount": "sp.price_amount",
    "scheduled_plan_interval": "sp.billing_interval",
}
# The same read as _SELECT, by hand for the driver: columns in Subscription's field order.
_FETCH = (
    "SELECT "
    + ", ".join(
        f"{_PLAN_COLUMNS[f.name]} AS {f.name}" if f.name in _PLAN_COLUMNS else f"s.{f.name}"
        for f in fields(Subscription)
    )
    + " FROM subscription s JOIN plan p ON p.id = s.plan_id"
    + " LEFT JOIN plan sp ON sp.id = s.scheduled_plan_id WHERE s.id = $1"
)


async def fetch(conn: Connection, subscription_id: int) -> Subscription:
    """:func:`get` on a plain asyncpg connection (one prepared statement)."""
    row = await conn.fetchrow(_FETCH, subscription_id)
    if row is None:
        raise SubscriptionNotFound(subscription_id)
    return Subscription(*row)


# A new subscription, its first invoice (none in a trial) with its lines, its events (numbered
# from 1: event_seq starts at their count), its audit row and, optionally, the stored API
# response, in one statement; the ids were drawn before.
_SUB_COLUMNS = (
    "id, customer_id, plan_id, status, time_zone, billing_anchor, period_index, "
    "current_period_start, current_period_end, cancel_at_period_end, canceled_at, "
    "credit_balance, event_seq, version, created_at, updated_at, trial_end"
)
# A TRIALING subscription's trial ends at its billing anchor ($6).
_SUB_VALUES = (
    "$1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, "
    "CASE WHEN $4::varchar = 'TRIALING' THEN $6::timestamptz END"
)
_REST = (
    """inv AS (
    INSERT INTO invoice (id, subscription_id, customer_id, kind, period_index, period_start,
        period_end, subtotal, credit_applied, amount, currency, status, attempt_count,
        next_attempt_at, paid_at, closed_at, created_at, updated_at)
    SELECT $17, sub.id, $18, $19, $20, $21, $22, $23, $24, $25, $26, $27, $28, $29, $30, $31,
        $32, $32
    FROM sub
    WHERE $17::bigint IS NOT NULL
    RETURNING id
), lines AS (
    INSERT INTO invoice_line (invoice_id, line_no, kind, description, quantity, unit_amount,
        amount, period_start, period_end)
    SELECT inv.id, l.line_no, l.kind, l.description, l.quantity, l.unit_amount, l.amount,
        l.period_start, l.period_end
    FROM inv, unnest($33::text[], $34::text[], $35::int[], $36::bigint[], $37::bigint[],
        $38::timestamptz[], $39::timestamptz[])
        WITH ORDINALITY AS l(kind, description, quantity, unit_amount, amount, period_start,
                             period_end, line_no)
    RETURNING amount
), ev AS (
    INSERT INTO outbox_event (event_id, aggregate_id, sequence, event_type, payload, occurred_at)
    SELECT e.event_id, sub.id, e.ord, e.event_type, e.payload, $43
    FROM sub, unnest($40::uuid[], $41::text[], $42::jsonb[])
        WITH ORDINALITY AS e(event_id, event_type, payload, ord)
    RETURNING id
), aud AS (
    """
    + audit.insert_sql(44, subject="sub", version_after="$14")
    + """
    RETURNING id
)"""
)
_COUNTS = (
    "(SELECT count(*) FROM inv), (SELECT count(*) FROM ev), (SELECT count(*) FROM aud), "
    "(SELECT coalesce(sum(amount), 0) FROM lines)"
)
_INSERT_NEW = (
    f"WITH sub AS (INSERT INTO subscription ({_SUB_COLUMNS}) VALUES ({_SUB_VALUES}) "
    f"RETURNING id), {_REST}"
)
_INSERT_NEW_PLAIN = f"{_INSERT_NEW} SELECT {_COUNTS}"
_INSERT_NEW_WITH_RECORD = (
    f"{_INSERT_NEW}, rec AS ({idempotency.insert_record_sql(51)} RETURNING key) SELECT {_COUNTS}"
)
# The same, as the whole of a keyed request (autocommit): take the key's lock ($61) and look
# the key up; insert only if the lock was free and no response is stored. The look-up's
# snapshot predates the lock: a first request that committed in between is not seen, and its
# stored response makes this statement's record insert fail (unique violation, nothing
# written): the caller then takes the general path, which finds and replays it.
_INSERT_NEW_UNLESS_CLAIMED = f"""
WITH lock AS MATERIALIZED (SELECT pg_try_advisory_xact_lock($61) AS ok),
stored AS MATERIALIZED (
    SELECT {idempotency.STORED_COLUMNS} FROM idempotency_key WHERE client_id = $51 AND key = $52
),
go AS MATERIALIZED (SELECT 1 FROM lock WHERE lock.ok AND NOT EXISTS (SELECT 1 FROM stored)),
sub AS (
    INSERT INTO subscription ({_SUB_COLUMNS}) SELECT {_SUB_VALUES} FROM go RETURNING id
), {_REST}, rec AS ({idempotency.insert_record_sql(51, source="sub")} RETURNING key)
SELECT lock.ok, (SELECT count(*) FROM sub), {_COUNTS}, (SELECT count(*) FROM rec), stored.*
FROM lock LEFT JOIN stored ON true
"""


@dataclass(frozen=True)
class Claimed:
    """What :func:`insert_new_unless_claimed` found: the key's lock was free (``locked``), the
    rows were written (``created``), or the response already stored under the key."""

    locked: bool
    created: bool
    stored: idempotency.StoredResponse | None


_NO_INVOICE = (None,) * 16


def _invoice_parameters(invoice: Invoice | None) -> tuple[object, ...]:
    if invoice is None:  # a trial: the statement inserts no invoice
        return _NO_INVOICE
    return (
        invoice.id,
        invoice.customer_id,
        invoice.kind,
        invoice.period_index,
        invoice.period_start,
        invoice.period_end,
        invoice.subtotal,
        invoice.credit_applied,
        invoice.amount,
        invoice.currency,
        invoice.status,
        invoice.attempt_count,
        invoice.next_attempt_at,
        invoice.paid_at,
        invoice.closed_at,
        invoice.created_at,
    )


def _written(invoice: Invoice | None, events: Sequence[DomainEvent]) -> tuple[int, ...]:
    """What the statement must have written: invoices, events, audit rows, the lines' total
    (the first invoice's amount, as its lines say)."""
    if invoice is None:
        return (0, len(events), 1, 0)
    return (1, len(events), 1, invoice.amount)


@dataclass(frozen=True, slots=True)
class NewValues:
    """What a new subscription's statement writes, by part: the subscription's and its first
    invoice's columns, the lines' and the events' columns (one list each), and ``now``. The
    one-request statement takes them flat, in this order (:meth:`flat`); the group statement
    takes each part into its own arrays."""

    row: tuple[object, ...]
    lines: tuple[list[object], ...]
    events: tuple[list[object], ...]
    now: datetime

    def flat(self) -> tuple[object, ...]:
        return (*self.row, *self.lines, *self.events, self.now)


def new_values(
    sub: Subscription,
    invoice: Invoice | None,
    lines: Sequence[InvoiceLine],
    events: Sequence[DomainEvent],
    now: datetime,
) -> NewValues:
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    if any(e.subscription_id != sub.id for e in events):
        raise ValueError("every event must be the new subscription's")
    if any(e.version != 1 for e in events):  # the statement leaves schema_version at its default
        raise ValueError("a new subscription's events are written at schema version 1")
    row = (
        sub.id,
        sub.customer_id,
        sub.plan_id,
        sub.status,
        sub.time_zone,
        sub.billing_anchor,
        sub.period_index,
        sub.current_period_start,
        sub.current_period_end,
        sub.cancel_at_period_end,
        sub.canceled_at,
        sub.credit_balance,
        len(events),
        sub.version,
        sub.created_at,
        sub.updated_at,
        *_invoice_parameters(invoice),
    )
    line_columns: tuple[list[object], ...] = (
        [str(line.kind) for line in lines],
        [line.description for line in lines],
        [line.quantity for line in lines],
        [line.unit_amount for line in lines],
        [line.amount for line in lines],
        [line.period_start for line in lines],
        [line.period_end for line in lines],
    )
    event_columns: tuple[list[object], ...] = (
        [uuid.uuid4() for _ in events],
        [str(e.type) for e in events],
        [e.payload_json() for e in events],
    )
    return NewValues(row, line_columns, event_columns, now)


async def insert_new(
    conn: Connection,
    sub: Subscription,
    invoice: Invoice | None,
    lines: Sequence[InvoiceLine],
    events: Sequence[DomainEvent],
    *,
    now: datetime,
    audit_entry: audit.AuditEntry,
    record: idempotency.NewRecord | None = None,
) -> None:
    """Insert ``sub`` (ids already drawn) with its first ``invoice`` (none for a trial), that
    invoice's ``lines``, ``events`` and ``audit_entry`` in one round trip on a driver
    connection, and ``record`` (the API's stored response) with them. :class:`UnknownCustomer`
    when ``sub``'s customer does not exist (the statement wrote nothing)."""
    params = (
        *new_values(sub, invoice, lines, events, now).flat(),
        *audit.parameters(audit_entry, now),
    )
    try:
        if record is None:
            row = await conn.fetchrow(_INSERT_NEW_PLAIN, *params)
        else:
            row = await conn.fetchrow(
                _INSERT_NEW_WITH_RECORD, *params, *idempotency.record_parameters(record)
            )
    except asyncpg.ForeignKeyViolationError as exc:
        raise _unknown_customer(exc, sub) from exc
    if tuple(row) != _written(invoice, events):
        raise RuntimeError(f"insert_new wrote {tuple(row)} invoices/events/audit rows/line total")


async def insert_new_unless_claimed(
    conn: Connection,
    sub: Subscription,
    invoice: Invoice | None,
    lines: Sequence[InvoiceLine],
    events: Sequence[DomainEvent],
    *,
    now: datetime,
    audit_entry: audit.AuditEntry,
    record: idempotency.NewRecord,
) -> Claimed:
    """:func:`insert_new` with ``record`` as one whole keyed request, on a connection outside
    any transaction (the statement is its own): only if the key's lock is free and nothing is
    stored under the key. Raises ``asyncpg.UniqueViolationError`` when a first request with
    the key committed while this one started (see ``_INSERT_NEW_UNLESS_CLAIMED``), and
    :class:`UnknownCustomer` as :func:`insert_new` does."""
    if conn.is_in_transaction():
        raise RuntimeError("insert_new_unless_claimed is a whole transaction by itself")
    try:
        row = await conn.fetchrow(
            _INSERT_NEW_UNLESS_CLAIMED,
            *new_values(sub, invoice, lines, events, now).flat(),
            *audit.parameters(audit_entry, now),
            *idempotency.record_parameters(record),
            idempotency.lock_id(record.client_id, record.key),
        )
    except asyncpg.ForeignKeyViolationError as exc:
        raise _unknown_customer(exc, sub) from exc
    return claimed_from(row, invoice, events, statement="insert_new_unless_claimed")


def claimed_from(
    row: Sequence[Any],
    invoice: Invoice | None,
    events: Sequence[DomainEvent],
    *,
    statement: str,
) -> Claimed:
    """What a keyed create statement answered for one request — whether it took the key's lock,
    the rows it wrote (all the request's, or none), the response stored under the key —
    checked against what it had to write."""
    locked, subs, invoices, written_events, audits, line_total, records = row[:7]
    created = subs == 1
    if (subs, invoices, written_events, audits, line_total, records) != (
        (1, *_written(invoice, events), 1) if created else (0, 0, 0, 0, 0, 0)
    ):
        raise RuntimeError(f"{statement} wrote {tuple(row[:7])}")
    stored = None if row[7] is None else idempotency.stored_response(row[7:])
    return Claimed(bool(locked), created, stored)


def _unknown_customer(exc: Exception, sub: Subscription) -> Exception:
    """:class:`UnknownCustomer` when ``exc`` (a foreign key violation) is the customer's (the
    statement wrote nothing), else ``exc`` itself."""
    if getattr(exc, "constraint_name", None) in _CUSTOMER_FOREIGN_KEYS:
        return UnknownCustomer(sub.customer_id)
    return exc


async def get(session: AsyncSession, subscription_id: int) -> Subscription:
    row = (await session.execute(_SELECT.where(_s.c.id == subscription_id))).mappings().first()
    if row is None:
        raise SubscriptionNotFound(subscription_id)
    return Subscription(**row)


async def get_at(
    session: AsyncSession, subscription_id: int, expected_version: int | None
) -> Subscription:
    """:func:`get`, refused with ``VersionConflict`` when the caller expects another version
    (``None``: any version)."""
    sub = await get(session, subscription_id)
    if expected_version is not None and expected_version != sub.version:
        raise VersionConflict(subscription_id, expected_version, sub.version)
    return sub


async def get_for_change(
    session: AsyncSession, subscription_id: int, expected_version: int | None, now: datetime
) -> tuple[Subscription, datetime]:
    """:func:`get_at`, and the instant a change asked for at ``now`` happens
    (``subscription.change_instant``: never before the row's last write)."""
    sub = await get_at(session, subscription_id, expected_version)
    return sub, change_instant(now, sub.updated_at)


async def exists(session: AsyncSession, subscription_id: int) -> bool:
    row = await session.execute(select(_s.c.id).where(_s.c.id == subscription_id))
    return row.first() is not None


async def update_versioned(
    session: AsyncSession,
    subscription_id: int,
    *,
    expected_version: int,
    now: datetime,
    values: dict[str, Any],
) -> int:
    """Apply ``values`` only if the row is still at ``expected_version``; return the new one.

    Under READ COMMITTED an UPDATE that waited for a concurrent writer re-checks its WHERE
    clause against the committed row, so a version bumped meanwhile makes it match nothing.
    """
    result = await session.execute(
        update(_s)
        .where(_s.c.id == subscription_id, _s.c.version == expected_version)
        .values(**values, version=_s.c.version + 1, updated_at=now)
        .returning(_s.c.version)
    )
    new_version = result.scalar_one_or_none()
    if new_version is not None:
        return int(new_version)
    current = (
        await session.execute(select(_s.c.version).where(_s.c.id == subscription_id))
    ).scalar_one_or_none()
    if current is None:
        raise SubscriptionNotFound(subscription_id)
    raise VersionConflict(subscription_id, expected_version, int(current))


async def add_credit_entry(
    session: AsyncSession | AsyncConnection,
    *,
    subscription_id: int,
    amount: int,
    reason: str,
    now: datetime,
    invoice_id: int | None = None,
) -> None:
    """Ledger line for credit granted (amount > 0) or consumed (amount < 0)."""
    await session.execute(
        insert(t.credit_entry).values(
            subscription_id=subscription_id,
            amount=amount,
            reason=reason,
            invoice_id=invoice_id,
            created_at=now,
        )
    )


async def consume_credit(
    session: AsyncSession | AsyncConnection, subscription_id: int, amount: int, *, now: datetime
) -> None:
    """Take ``amount`` off the balance (its INVOICE ledger lines are the caller's), in a
    transaction that already made its version-checked write to this subscription."""
    await session.execute(
        update(_s)
        .where(_s.c.id == subscription_id)
        .values(credit_balance=_s.c.credit_balance - amount, updated_at=now)
    )


async def lock_subscriptions(session: AsyncSession | AsyncConnection, ids: list[int]) -> None:
    """Row-lock the subscriptions, in id order (the lock order of every writer)."""
    if ids:
        await session.execute(
            text(
                "SELECT id FROM subscription WHERE id = ANY(CAST(:ids AS bigint[])) "
                "ORDER BY id FOR UPDATE"
            ),
            {"ids": sorted(ids)},
        )
