"""``audit_event``: who changed what, written in the transaction of the change.

Each API write adds exactly one row: the client (or NULL for an operator on the command line),
the action, the subject, its version before and after, and the request id of the logs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

# Actions (audit_event.action).
SUBSCRIPTION_CREATE = "subscription.create"
SUBSCRIPTION_CANCEL = "subscription.cancel"
SUBSCRIPTION_CHANGE_PLAN = "subscription.change_plan"
SUBSCRIPTION_RESUME_RENEWAL = "subscription.resume_renewal"
SUBSCRIPTION_END_TRIAL = "subscription.end_trial"
SUBSCRIPTION_SET_TAX_LOCATION = "subscription.set_tax_location"
SUBSCRIPTION_APPLY_COUPON = "subscription.apply_coupon"
COUPON_CREATE = "coupon.create"
SUBSCRIPTION_PAUSE = "subscription.pause"
SUBSCRIPTION_RESUME = "subscription.resume"
SUBSCRIPTION_SCHEDULE_PLAN_CHANGE = "subscription.schedule_plan_change"
CUSTOMER_CREATE = "customer.create"
API_KEY_CREATE = "api_key.create"
API_KEY_REVOKE = "api_key.revoke"
API_KEY_ROTATE = "api_key.rotate"
RECONCILIATION_RESOLVE = "reconciliation.resolve"
PAYMENT_METHOD_SET = "payment_method.set"

SUBSCRIPTION = "subscription"
API_CLIENT = "api_client"
RECONCILIATION_ITEM = "reconciliation_item"
CUSTOMER = "customer"
COUPON = "coupon"

_COLUMNS = (
    "occurred_at",
    "source",
    "client_id",
    "action",
    "subject_type",
    "subject_id",
    "version_before",
    "version_after",
    "request_id",
    "detail",
)
# The values of :func:`parameters`, by name, with their SQL types (``detail``: JSON text).
ENTRY_COLUMNS = (
    ("occurred_at", "timestamptz"),
    ("source", "varchar"),
    ("client_id", "bigint"),
    ("action", "varchar"),
    ("subject_type", "varchar"),
    ("request_id", "text"),
    ("detail", "text"),
)
_NAMED_ENTRY = tuple(name for name, _ in ENTRY_COLUMNS)


@dataclass(frozen=True)
class Actor:
    """Who makes a change: an API client with the request's id, or an operator (CLI)."""

    source: str
    client_id: int | None = None
    request_id: str | None = None

    @staticmethod
    def api(client_id: int, request_id: str | None) -> Actor:
        return Actor("API", client_id, request_id)

    @staticmethod
    def cli() -> Actor:
        return Actor("CLI")


@dataclass(frozen=True)
class AuditEntry:
    actor: Actor
    action: str
    subject_type: str
    subject_id: int
    version_before: int | None = None
    version_after: int | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)


async def record(
    session: AsyncSession | AsyncConnection, entry: AuditEntry, *, now: datetime
) -> None:
    values = dict(zip(_NAMED_ENTRY, parameters(entry, now), strict=True))
    await session.execute(
        _RECORD,
        {
            **values,
            "subject_id": entry.subject_id,
            "version_before": entry.version_before,
            "version_after": entry.version_after,
        },
    )


async def record_subscription_change(
    session: AsyncSession | AsyncConnection,
    actor: Actor | None,
    action: str,
    subscription_id: int,
    *,
    before: int,
    after: int,
    detail: Mapping[str, Any],
    now: datetime,
) -> None:
    """The audit row of a change to a subscription made by ``actor`` (none: not recorded)."""
    if actor is None:
        return
    entry = AuditEntry(
        actor,
        action,
        SUBSCRIPTION,
        subscription_id,
        version_before=before,
        version_after=after,
        detail=detail,
    )
    await record(session, entry, now=now)


def insert_select_sql(values: Sequence[str], rows: str = "") -> str:
    """The one ``INSERT`` of audit rows: ``values`` are the SQL expressions of the columns, in
    order (occurred_at, source, client_id, action, subject_type, subject_id, version_before,
    version_after, request_id, detail as JSON text), read from ``rows`` (a relation of the
    caller's statement, one row each; none: one row)."""
    if len(values) != len(_COLUMNS):
        raise ValueError(f"{len(_COLUMNS)} audit values expected, got {len(values)}")
    *plain, detail = values
    source = f" FROM {rows}" if rows else ""
    return (
        f"INSERT INTO audit_event ({', '.join(_COLUMNS)}) "
        f"SELECT {', '.join(plain)}, CAST({detail} AS jsonb){source}"
    )


_RECORD = text(
    insert_select_sql(
        (
            *(f":{c}" for c in _NAMED_ENTRY[:5]),
            ":subject_id",
            ":version_before",
            ":version_after",
            *(f":{c}" for c in _NAMED_ENTRY[5:]),
        )
    )
)


def insert_sql(first: int, *, subject: str, version_after: str) -> str:
    """``INSERT`` of an :class:`AuditEntry` as one part of a caller's statement: one row per row
    of the CTE ``subject`` (its ``id`` is the subject id), ``version_after`` an expression of
    it; the other values are parameters from ``$first`` (:func:`parameters`)."""
    p = [f"${first + i}" for i in range(7)]
    return insert_select_sql((*p[:5], f"{subject}.id", "NULL", version_after, *p[5:]), rows=subject)


def parameters(entry: AuditEntry, now: datetime) -> tuple[object, ...]:
    """The entry's values but the subject id and versions, in :data:`ENTRY_COLUMNS` order."""
    return (
        now,
        entry.actor.source,
        entry.actor.client_id,
        entry.action,
        entry.subject_type,
        entry.actor.request_id,
        json.dumps(dict(entry.detail), separators=(",", ":")),
    )
