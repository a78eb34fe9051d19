"""New keyed subscriptions: the one statement that writes them, for a group of requests (a
group of one is the same statement).

Each row of the group is decided on its own: the key's advisory lock taken without waiting,
the key looked up (a response stored and expired is deleted), and the subscription, its first
invoice and lines, its events, its audit row and the stored response inserted only if the lock
was free and no live response is stored — and the answer is one :class:`Claimed` per request,
in order. PostgreSQL pays most of a create per statement (executor start-up, CHECK constraints
compiled again, the commit), so a group of N costs it far less than N statements. The requests'
values go as one typed array per column (``unnest``), each built from its row by column name,
and each key is looked up by its own index probe: the plan a connection caches is made once,
often while the table is empty, and a join planned then (a scan of the whole table) would slow
every group as the table grows.

The statement is all or nothing: when it fails (an unknown customer, a key that a first request
committed meanwhile, anything else) nothing is written and the error is raised. Its look-up's
snapshot predates the lock: a first request that committed in between is not seen, and its
stored response makes the record's insert fail (``asyncpg.UniqueViolationError``): the caller
runs the request again, and the statement then finds it. Two requests of one group must not
share a key (the advisory lock is re-entrant within the statement): the caller keeps them apart.
The statement is its own transaction on a connection outside one, or part of the caller's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg  # type: ignore[import-untyped]

from billing_core.db import pg
from billing_core.db.pg import Connection, Statement
from billing_core.domain.events import DomainEvent
from billing_core.domain.invoice_lines import InvoiceLine
from billing_core.repo import audit, idempotency, outbox
from billing_core.repo.invoices import Invoice
from billing_core.repo.subscriptions import Claimed, Subscription, unknown_customer


@dataclass(frozen=True)
class KeyedNew:
    """One request's new subscription: its rows, its audit entry and the response to store."""

    sub: Subscription
    invoice: Invoice | None  # None in a trial
    lines: Sequence[InvoiceLine]
    events: Sequence[DomainEvent]
    now: datetime
    audit_entry: audit.AuditEntry
    record: idempotency.NewRecord


# The new subscription's and its invoice's fields, by name (and their SQL types).
_SUBSCRIPTION_COLUMNS = (
    ("id", "bigint"),
    ("customer_id", "bigint"),
    ("plan_id", "bigint"),
    ("status", "varchar"),
    ("time_zone", "text"),
    ("billing_anchor", "timestamptz"),
    ("period_index", "int"),
    ("current_period_start", "timestamptz"),
    ("current_period_end", "timestamptz"),
    ("cancel_at_period_end", "boolean"),
    ("canceled_at", "timestamptz"),
    ("credit_balance", "bigint"),
    ("version", "bigint"),
    ("created_at", "timestamptz"),
    ("updated_at", "timestamptz"),
)
_INVOICE_COLUMNS = (
    ("id", "bigint"),
    ("customer_id", "bigint"),
    ("kind", "varchar"),
    ("period_index", "int"),
    ("period_start", "timestamptz"),
    ("period_end", "timestamptz"),
    ("subtotal", "bigint"),
    ("credit_applied", "bigint"),
    ("amount", "bigint"),
    ("currency", "varchar"),
    ("status", "varchar"),
    ("attempt_count", "int"),
    ("next_attempt_at", "timestamptz"),
    ("paid_at", "timestamptz"),
    ("closed_at", "timestamptz"),
    ("created_at", "timestamptz"),
)
# The audit row's columns that the new subscription's row gives.
_AUDIT_FROM_SUBSCRIPTION = {
    "subject_id": "id",
    "version_before": "NULL",
    "version_after": "version",
}
_AUDIT_COLUMNS = tuple(
    (f"aud_{name}", kind) for name, kind in audit.COLUMNS if name not in _AUDIT_FROM_SUBSCRIPTION
)
# One row per request.
_REQUEST_COLUMNS = (
    ("n", "int"),
    *_SUBSCRIPTION_COLUMNS,
    ("event_seq", "bigint"),
    *((f"inv_{name}", kind) for name, kind in _INVOICE_COLUMNS),
    ("occurred_at", "timestamptz"),
    *_AUDIT_COLUMNS,
    *idempotency.RECORD_COLUMNS,
    ("lock_id", "bigint"),
)
_LINE_COLUMNS = (
    ("n", "int"),
    ("line_no", "int"),
    ("kind", "varchar"),
    ("description", "text"),
    ("quantity", "int"),
    ("unit_amount", "bigint"),
    ("amount", "bigint"),
    ("period_start", "timestamptz"),
    ("period_end", "timestamptz"),
)


def _unnest(prefix: str, columns: tuple[tuple[str, str], ...], alias: str) -> str:
    """The rows of the arrays ``:<prefix><column>``, one per column, as ``alias``."""
    arrays = ", ".join(f"CAST(:{prefix}{name} AS {kind}[])" for name, kind in columns)
    return f"unnest({arrays}) AS {alias}({', '.join(name for name, _ in columns)})"


# The audit row of each new subscription, from its request's columns (audit.insert_select_sql).
_AUDIT_VALUES = {
    **{name: f"aud_{name}" for name, _ in audit.COLUMNS},
    **_AUDIT_FROM_SUBSCRIPTION,
}


INSERT_GROUP = Statement(
    f"""
WITH {idempotency.claim_sql(_unnest("r_", _REQUEST_COLUMNS, "r"))},
go AS MATERIALIZED (
    SELECT req.* FROM req
    WHERE req.ok
        AND NOT EXISTS (
            SELECT 1 FROM found WHERE found.n = req.n AND found.expires_at > req.completed_at
        )
        AND (SELECT count(*) FROM expired) >= 0
),
sub AS (
    INSERT INTO subscription (id, customer_id, plan_id, status, time_zone, billing_anchor,
        period_index, current_period_start, current_period_end, cancel_at_period_end,
        canceled_at, credit_balance, event_seq, version, created_at, updated_at, trial_end)
    SELECT id, customer_id, plan_id, status, time_zone, billing_anchor, period_index,
        current_period_start, current_period_end, cancel_at_period_end, canceled_at,
        credit_balance, event_seq, version, created_at, updated_at,
        CASE WHEN status = 'TRIALING' THEN billing_anchor END
    FROM go
    RETURNING id
), inv AS (
    INSERT INTO invoice (id, subscription_id, customer_id, kind, period_index, period_start,
        period_end, subtotal, credit_applied, amount, currency, status, attempt_count,
        next_attempt_at, paid_at, closed_at, created_at, updated_at)
    SELECT inv_id, id, inv_customer_id, inv_kind, inv_period_index, inv_period_start,
        inv_period_end, inv_subtotal, inv_credit_applied, inv_amount, inv_currency, inv_status,
        inv_attempt_count, inv_next_attempt_at, inv_paid_at, inv_closed_at, inv_created_at,
        inv_created_at
    FROM go
    WHERE inv_id IS NOT NULL
    RETURNING id, subscription_id
), lines AS (
    INSERT INTO invoice_line (invoice_id, line_no, kind, description, quantity, unit_amount,
        amount, period_start, period_end)
    SELECT go.inv_id, l.line_no, l.kind, l.description, l.quantity, l.unit_amount, l.amount,
        l.period_start, l.period_end
    FROM {_unnest("l_", _LINE_COLUMNS, "l")} JOIN go ON go.n = l.n
    WHERE go.inv_id IS NOT NULL
    RETURNING invoice_id, amount
), ev AS (
    {
        outbox.insert_sql(
            bases="(SELECT id, 0::bigint AS base, occurred_at FROM go)",
            occurred_at="b.occurred_at",
        )
    }
    RETURNING aggregate_id
), aud AS (
    {audit.insert_select_sql(_AUDIT_VALUES, rows="go")}
    RETURNING subject_id
), rec AS (
    {idempotency.insert_select_sql(rows="go")}
    RETURNING client_id, key
)
SELECT req.n, req.ok AS locked,
    (SELECT count(*) FROM sub WHERE sub.id = req.id) AS subscriptions,
    (SELECT count(*) FROM inv WHERE inv.subscription_id = req.id) AS invoices,
    (SELECT count(*) FROM ev WHERE ev.aggregate_id = req.id) AS events,
    (SELECT count(*) FROM aud WHERE aud.subject_id = req.id) AS audits,
    (SELECT coalesce(sum(lines.amount), 0) FROM lines WHERE lines.invoice_id = req.inv_id)
        AS line_total,
    (SELECT count(*) FROM rec WHERE rec.client_id = req.client_id AND rec.key = req.key)
        AS records,
    {", ".join(f"found.{c}" for c in idempotency.STORED_COLUMNS)}
FROM req LEFT JOIN found ON found.n = req.n AND found.expires_at > req.completed_at
ORDER BY req.n
"""
)


def _request(n: int, item: KeyedNew) -> dict[str, object]:
    sub, invoice = item.sub, item.invoice
    if item.now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    if any(e.subscription_id != sub.id for e in item.events):
        raise ValueError("every event must be the new subscription's")
    return {
        "n": n,
        **{name: getattr(sub, name) for name, _ in _SUBSCRIPTION_COLUMNS},
        "event_seq": len(item.events),  # events are numbered from 1
        **{
            f"inv_{name}": None if invoice is None else getattr(invoice, name)
            for name, _ in _INVOICE_COLUMNS
        },
        "occurred_at": item.now,
        **{
            f"aud_{name}": value
            for name, value in audit.parameters(item.audit_entry, item.now).items()
            if name not in _AUDIT_FROM_SUBSCRIPTION
        },
        **idempotency.record_values(item.record),
        "lock_id": idempotency.lock_id(item.record.client_id, item.record.key),
    }


def _lines(n: int, lines: Sequence[InvoiceLine]) -> list[dict[str, object]]:
    return [
        {
            "n": n,
            "line_no": line_no,
            "kind": str(line.kind),
            "description": line.description,
            "quantity": line.quantity,
            "unit_amount": line.unit_amount,
            "amount": line.amount,
            "period_start": line.period_start,
            "period_end": line.period_end,
        }
        for line_no, line in enumerate(lines, start=1)
    ]


def _arrays(
    prefix: str, rows: list[dict[str, object]], columns: tuple[tuple[str, str], ...]
) -> dict[str, list[Any]]:
    names = [name for name, _ in columns]
    if any(row.keys() != set(names) for row in rows):
        raise ValueError("a row does not match its columns")
    return {f"{prefix}{name}": [row[name] for row in rows] for name in names}


def parameters(items: Sequence[KeyedNew]) -> dict[str, object]:
    """The statement's arrays: one per column of requests (``r_``) and of lines (``l_``), then
    the events' (``outbox.event_parameters``)."""
    requests, lines = [], []
    for n, item in enumerate(items):
        requests.append(_request(n, item))
        lines.extend(_lines(n, item.lines))
    return {
        **_arrays("r_", requests, _REQUEST_COLUMNS),
        **_arrays("l_", lines, _LINE_COLUMNS),
        **outbox.event_parameters([event for item in items for event in item.events]),
    }


def _claimed(row: Mapping[str, Any], item: KeyedNew) -> Claimed:
    """What the statement answered for one request — whether it took the key's lock, the rows
    it wrote (all the request's, or none), the live response stored under the key — checked
    against what it had to write."""
    written = (
        row["subscriptions"],
        row["invoices"],
        row["events"],
        row["audits"],
        row["line_total"],
        row["records"],
    )
    created = row["subscriptions"] == 1
    invoice = item.invoice
    expected = (0, 0, 0, 0, 0, 0)
    if created:
        total = 0 if invoice is None else invoice.amount  # the first invoice's, as its lines say
        expected = (1, int(invoice is not None), len(item.events), 1, total, 1)
    if written != expected:
        raise RuntimeError(f"the create statement wrote {written} for {expected}")
    claim = idempotency.claimed(row)
    return Claimed(claim.locked, created, claim.stored)


async def insert_unless_claimed(conn: Connection, items: Sequence[KeyedNew]) -> list[Claimed]:
    """One :class:`Claimed` per item, in order, from one statement (see the module). Raises what
    the statement raised (nothing written) — :class:`subscriptions.UnknownCustomer` for the
    unknown customer of a group of one, ``asyncpg.ForeignKeyViolationError`` in a larger group,
    ``asyncpg.UniqueViolationError`` for a key committed meanwhile."""
    if not items:
        return []
    keys = {(item.record.client_id, item.record.key) for item in items}
    if len(keys) != len(items):
        raise ValueError("two requests of one group share a key")
    try:
        rows = await pg.fetch(conn, INSERT_GROUP, parameters(items))
    except asyncpg.ForeignKeyViolationError as exc:
        if len(items) == 1:
            raise unknown_customer(exc, items[0].sub) from exc
        raise
    if [row["n"] for row in rows] != list(range(len(items))):
        raise RuntimeError("the create statement answered for other requests")
    return [_claimed(row, item) for item, row in zip(items, rows, strict=True)]
