"""Subscriptions: insert, read (with the plan), and version-checked updates.

Every write bumps ``version``. API writes are optimistic: they read a version, decide, and write
with ``WHERE id = :id AND version = :expected``; when another transaction (the renewer, the
collector, another request) committed first, no row matches and :class:`VersionConflict` tells
the caller the current version instead of overwriting that work.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import datetime
from functools import cache
from typing import Any

from billing_core.db import pg
from billing_core.db.arrays import int_array
from billing_core.db.pg import Connection, Statement
from billing_core.domain.errors import DomainError
from billing_core.domain.subscription import (
    Pause,
    PauseBehavior,
    SubscriptionState,
    SubscriptionStatus,
    change_instant,
)
from billing_core.repo import idempotency


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
# Subscriptions (``s``) with their plan, as :class:`Subscription` rows (add WHERE / ORDER BY).
SELECT_SQL = (
    "SELECT "
    + ", ".join(
        f"{_PLAN_COLUMNS[f.name]} AS {f.name}" if f.name in _PLAN_COLUMNS else f"s.{f.name}"
        for f in fields(Subscription)
    )
    + " FROM subscription s JOIN plan p ON p.id = s.plan_id"
    + " LEFT JOIN plan sp ON sp.id = s.scheduled_plan_id"
)
_GET = Statement(SELECT_SQL + " WHERE s.id = :subscription_id")
_EXISTS = Statement("SELECT id FROM subscription WHERE id = :subscription_id")
_VERSION = Statement("SELECT version FROM subscription WHERE id = :subscription_id")


@dataclass(frozen=True)
class Claimed:
    """What the keyed create statement (``subscription_groups``) found for one request: the
    key's lock was free (``locked``), the rows were written (``created``), or the live response
    already stored under the key."""

    locked: bool
    created: bool
    stored: idempotency.StoredResponse | None


def unknown_customer(exc: Exception, sub: Subscription) -> Exception:
    """:class:`UnknownCustomer` when ``exc`` (a foreign key violation of a statement inserting
    ``sub``) is the customer's, else ``exc`` itself."""
    if getattr(exc, "constraint_name", None) in _CUSTOMER_FOREIGN_KEYS:
        return UnknownCustomer(sub.customer_id)
    return exc


async def get(conn: Connection, subscription_id: int) -> Subscription:
    row = await pg.fetchrow(conn, _GET, {"subscription_id": subscription_id})
    if row is None:
        raise SubscriptionNotFound(subscription_id)
    return Subscription(**row)


async def get_at(
    conn: Connection, subscription_id: int, expected_version: int | None
) -> Subscription:
    """:func:`get`, refused with ``VersionConflict`` when the caller expects another version
    (``None``: any version)."""
    sub = await get(conn, subscription_id)
    if expected_version is not None and expected_version != sub.version:
        raise VersionConflict(subscription_id, expected_version, sub.version)
    return sub


async def get_for_change(
    conn: Connection, subscription_id: int, expected_version: int | None, now: datetime
) -> tuple[Subscription, datetime]:
    """:func:`get_at`, and the instant a change asked for at ``now`` happens
    (``subscription.change_instant``: never before the row's last write)."""
    sub = await get_at(conn, subscription_id, expected_version)
    return sub, change_instant(now, sub.updated_at)


async def exists(conn: Connection, subscription_id: int) -> bool:
    return await pg.fetchrow(conn, _EXISTS, {"subscription_id": subscription_id}) is not None


# The columns a change may set (``update_versioned``'s values).
_CHANGEABLE = frozenset(
    {
        "status",
        "plan_id",
        "scheduled_plan_id",
        "billing_anchor",
        "anchor_period_index",
        "period_index",
        "current_period_start",
        "current_period_end",
        "cancel_at_period_end",
        "canceled_at",
        "credit_balance",
        "trial_end",
        "pause_behavior",
        "paused_at",
        "pause_resumes_at",
    }
)


@cache
def _update_statement(columns: tuple[str, ...]) -> Statement:
    unknown = set(columns) - _CHANGEABLE
    if unknown:
        raise ValueError(f"not a changeable subscription column: {sorted(unknown)}")
    assignments = "".join(f"{c} = :set_{c}, " for c in columns)
    return Statement(
        f"""
        UPDATE subscription
        SET {assignments}version = version + 1, updated_at = :now
        WHERE id = :subscription_id AND version = :expected_version
        RETURNING version
        """
    )


async def update_versioned(
    conn: Connection,
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
    columns = tuple(sorted(values))
    new_version = await pg.fetchval(
        conn,
        _update_statement(columns),
        {
            **{f"set_{c}": values[c] for c in columns},
            "now": now,
            "subscription_id": subscription_id,
            "expected_version": expected_version,
        },
    )
    if new_version is not None:
        return int(new_version)
    current = await pg.fetchval(conn, _VERSION, {"subscription_id": subscription_id})
    if current is None:
        raise SubscriptionNotFound(subscription_id)
    raise VersionConflict(subscription_id, expected_version, int(current))


_ADD_CREDIT_ENTRY = Statement(
    """
    INSERT INTO credit_entry (subscription_id, amount, reason, invoice_id, created_at)
    VALUES (:subscription_id, :amount, :reason, :invoice_id, :now)
    """
)
_CONSUME_CREDIT = Statement(
    """
    UPDATE subscription SET credit_balance = credit_balance - :amount, updated_at = :now
    WHERE id = :subscription_id
    """
)
_LOCK = Statement(
    """
    SELECT id FROM subscription WHERE id = ANY(CAST(:ids AS text)::bigint[])
    ORDER BY id FOR UPDATE
    """
)


async def add_credit_entry(
    conn: Connection,
    *,
    subscription_id: int,
    amount: int,
    reason: str,
    now: datetime,
    invoice_id: int | None = None,
) -> None:
    """Ledger line for credit granted (amount > 0) or consumed (amount < 0)."""
    await pg.execute(
        conn,
        _ADD_CREDIT_ENTRY,
        {
            "subscription_id": subscription_id,
            "amount": amount,
            "reason": reason,
            "invoice_id": invoice_id,
            "now": now,
        },
    )


async def consume_credit(
    conn: Connection, subscription_id: int, amount: int, *, now: datetime
) -> None:
    """Take ``amount`` off the balance (its INVOICE ledger lines are the caller's), in a
    transaction that already made its version-checked write to this subscription."""
    await pg.execute(
        conn, _CONSUME_CREDIT, {"subscription_id": subscription_id, "amount": amount, "now": now}
    )


async def lock_subscriptions(conn: Connection, ids: list[int]) -> None:
    """Row-lock the subscriptions, in id order (the lock order of every writer)."""
    if ids:
        await pg.fetch(conn, _LOCK, {"ids": int_array(sorted(ids))})
