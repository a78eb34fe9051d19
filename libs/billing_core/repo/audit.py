"""``audit_event``: who changed what, written in the transaction of the change.

Each API write adds exactly one row: the client (or NULL for an operator on the command line),
the action, the subject, its version before and after, and the request id of the logs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from billing_core.db import pg
from billing_core.db.pg import Connection, Statement

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

# An audit row's columns, in insert order, with their SQL types (for a statement that takes
# them as arrays); ``detail`` is JSON text, cast by the INSERT.
COLUMNS = (
    ("occurred_at", "timestamptz"),
    ("source", "varchar"),
    ("client_id", "bigint"),
    ("action", "varchar"),
    ("subject_type", "varchar"),
    ("subject_id", "bigint"),
    ("version_before", "bigint"),
    ("version_after", "bigint"),
    ("request_id", "text"),
    ("detail", "text"),
)


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


async def record(conn: Connection, entry: AuditEntry, *, now: datetime) -> None:
    await pg.execute(conn, _RECORD, parameters(entry, now))


async def record_subscription_change(
    conn: Connection,
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
    await record(conn, entry, now=now)


def insert_select_sql(values: Mapping[str, str], rows: str = "") -> str:
    """The one ``INSERT`` of audit rows: ``values`` holds the SQL expression of each of the
    :data:`COLUMNS` by name (``detail`` as JSON text), read from ``rows`` (a relation of the
    caller's statement, one row each; none: one row)."""
    if set(values) != {c for c, _ in COLUMNS}:
        raise ValueError(f"audit values for {sorted(values)}, not the columns {COLUMNS}")
    value = dict(values)
    value["detail"] = f"CAST({value['detail']} AS jsonb)"
    source = f" FROM {rows}" if rows else ""
    return (
        f"INSERT INTO audit_event ({', '.join(c for c, _ in COLUMNS)}) "
        f"SELECT {', '.join(value[c] for c, _ in COLUMNS)}{source}"
    )


_RECORD = Statement(insert_select_sql({c: f":{c}" for c, _ in COLUMNS}))


def parameters(entry: AuditEntry, now: datetime) -> dict[str, object]:
    """The entry's values by the name of their column (:data:`COLUMNS`)."""
    return {
        "occurred_at": now,
        "source": entry.actor.source,
        "client_id": entry.actor.client_id,
        "action": entry.action,
        "subject_type": entry.subject_type,
        "subject_id": entry.subject_id,
        "version_before": entry.version_before,
        "version_after": entry.version_after,
        "request_id": entry.actor.request_id,
        "detail": json.dumps(dict(entry.detail), separators=(",", ":")),
    }
