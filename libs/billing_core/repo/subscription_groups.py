"""New keyed subscriptions written by one statement for a whole group of requests.

:func:`subscriptions.insert_new_unless_claimed` for several requests at once: each row of the
group is decided exactly as that statement decides its one row — the key's advisory lock taken
without waiting, the key looked up, and the subscription, its first invoice and lines, its
events, its audit row and the stored response inserted only if the lock was free and nothing
is stored — and the answer is one :class:`Claimed` per request, in order. PostgreSQL pays most
of a create per statement (executor start-up, CHECK constraints compiled again, the commit), so
a group of N costs it far less than N statements. The requests' values go as one typed array
per column (``unnest``), and each key is looked up by its own index probe: the plan a
connection caches is made once, often while the table is empty, and a join planned then (a
scan of the whole table) would slow every group as the table grows.

The statement is all or nothing: when it fails (an unknown customer, a key that a first request
committed meanwhile, anything else) nothing is written and the error is raised; each request
then runs alone, on the path it takes without a group. Two requests of one group must not share
a key (the advisory lock is re-entrant within the statement): the caller keeps them apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from billing_core.db.pg import Connection
from billing_core.domain.events import DomainEvent
from billing_core.domain.invoice_lines import InvoiceLine
from billing_core.repo import audit, idempotency
from billing_core.repo.invoices import Invoice
from billing_core.repo.subscriptions import (
    Claimed,
    Subscription,
    claimed_from,
    insert_new_unless_claimed,
    new_values,
)


@dataclass(frozen=True)
class KeyedNew:
    """One request's new subscription, as :func:`insert_new_unless_claimed` takes it."""

    sub: Subscription
    invoice: Invoice | None
    lines: Sequence[InvoiceLine]
    events: Sequence[DomainEvent]
    now: datetime
    audit_entry: audit.AuditEntry
    record: idempotency.NewRecord


# One row per request: the values the one-request statement takes as $1..$32, $43..$61.
_REQUEST_COLUMNS = (
    ("n", "int"),
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
    ("event_seq", "bigint"),
    ("version", "bigint"),
    ("created_at", "timestamptz"),
    ("updated_at", "timestamptz"),
    ("inv_id", "bigint"),
    ("inv_customer_id", "bigint"),
    ("inv_kind", "varchar"),
    ("inv_period_index", "int"),
    ("inv_period_start", "timestamptz"),
    ("inv_period_end", "timestamptz"),
    ("inv_subtotal", "bigint"),
    ("inv_credit_applied", "bigint"),
    ("inv_amount", "bigint"),
    ("inv_currency", "varchar"),
    ("inv_status", "varchar"),
    ("inv_attempt_count", "int"),
    ("inv_next_attempt_at", "timestamptz"),
    ("inv_paid_at", "timestamptz"),
    ("inv_closed_at", "timestamptz"),
    ("inv_created_at", "timestamptz"),
    ("occurred_at", "timestamptz"),
    ("aud_at", "timestamptz"),
    ("aud_source", "varchar"),
    ("aud_client_id", "bigint"),
    ("aud_action", "varchar"),
    ("aud_subject_type", "varchar"),
    ("aud_request_id", "text"),
    ("aud_detail", "text"),
    ("client_id", "bigint"),
    ("key", "varchar"),
    ("request_method", "varchar"),
    ("request_path", "text"),
    ("request_hash", "bytea"),
    ("response_status", "int"),
    ("response_headers", "text"),
    ("response_body", "bytea"),
    ("rec_at", "timestamptz"),
    ("expires_at", "timestamptz"),
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
_EVENT_COLUMNS = (
    ("n", "int"),
    ("ord", "bigint"),
    ("event_id", "uuid"),
    ("event_type", "varchar"),
    ("payload", "text"),
)


def _unnest(first: int, columns: tuple[tuple[str, str], ...], alias: str) -> str:
    arrays = ", ".join(f"${first + i}::{kind}[]" for i, (_, kind) in enumerate(columns))
    return f"unnest({arrays}) AS {alias}({', '.join(name for name, _ in columns)})"


_FIRST_LINE = 1 + len(_REQUEST_COLUMNS)
_FIRST_EVENT = _FIRST_LINE + len(_LINE_COLUMNS)


INSERT_GROUP = f"""
WITH req AS MATERIALIZED (
    SELECT r.*, pg_try_advisory_xact_lock(r.lock_id) AS ok
    FROM {_unnest(1, _REQUEST_COLUMNS, "r")}
),
stored AS MATERIALIZED (
    SELECT req.n, k.*
    FROM req CROSS JOIN LATERAL (
        SELECT {idempotency.STORED_COLUMNS} FROM idempotency_key
        WHERE client_id = req.client_id AND key = req.key
        LIMIT 1
    ) k
),
go AS MATERIALIZED (
    SELECT req.* FROM req WHERE req.ok AND NOT EXISTS (SELECT 1 FROM stored WHERE stored.n = req.n)
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
    FROM {_unnest(_FIRST_LINE, _LINE_COLUMNS, "l")} JOIN go ON go.n = l.n
    WHERE go.inv_id IS NOT NULL
    RETURNING invoice_id, amount
), ev AS (
    INSERT INTO outbox_event (event_id, aggregate_id, sequence, event_type, payload, occurred_at)
    SELECT e.event_id, go.id, e.ord, e.event_type, e.payload::jsonb, go.occurred_at
    FROM {_unnest(_FIRST_EVENT, _EVENT_COLUMNS, "e")} JOIN go ON go.n = e.n
    RETURNING aggregate_id
), aud AS (
    INSERT INTO audit_event (occurred_at, source, client_id, action, subject_type, subject_id,
        version_before, version_after, request_id, detail)
    SELECT aud_at, aud_source, aud_client_id, aud_action, aud_subject_type, id, NULL, version,
        aud_request_id, aud_detail::jsonb
    FROM go
    RETURNING subject_id
), rec AS (
    INSERT INTO idempotency_key (client_id, key, request_method, request_path, request_hash,
        response_status, response_headers, response_body, created_at, completed_at, expires_at)
    SELECT client_id, key, request_method, request_path, request_hash,
        response_status, response_headers::jsonb, response_body, rec_at, rec_at,
        expires_at
    FROM go
    RETURNING client_id, key
)
SELECT req.n, req.ok,
    (SELECT count(*) FROM sub WHERE sub.id = req.id),
    (SELECT count(*) FROM inv WHERE inv.subscription_id = req.id),
    (SELECT count(*) FROM ev WHERE ev.aggregate_id = req.id),
    (SELECT count(*) FROM aud WHERE aud.subject_id = req.id),
    (SELECT coalesce(sum(lines.amount), 0) FROM lines WHERE lines.invoice_id = req.inv_id),
    (SELECT count(*) FROM rec WHERE rec.client_id = req.client_id AND rec.key = req.key),
    {", ".join(f"stored.{c.strip()}" for c in idempotency.STORED_COLUMNS.split(","))}
FROM req LEFT JOIN stored ON stored.n = req.n
ORDER BY req.n
"""


def _columns(items: Sequence[KeyedNew]) -> list[list[Any]]:
    """The statement's arrays: one per column of requests, of lines, of events."""
    requests: list[tuple[Any, ...]] = []
    lines: list[tuple[Any, ...]] = []
    events: list[tuple[Any, ...]] = []
    for n, item in enumerate(items):
        values = new_values(item.sub, item.invoice, item.lines, item.events, item.now)
        requests.append(
            (
                n,
                *values.row,
                values.now,
                *audit.parameters(item.audit_entry, item.now),
                *idempotency.record_parameters(item.record),
                idempotency.lock_id(item.record.client_id, item.record.key),
            )
        )
        lines.extend(
            (n, line_no, *line)
            for line_no, line in enumerate(zip(*values.lines, strict=True), start=1)
        )
        events.extend(
            (n, ord_, *event)
            for ord_, event in enumerate(zip(*values.events, strict=True), start=1)
        )
    return [
        *_transposed(requests, len(_REQUEST_COLUMNS)),
        *_transposed(lines, len(_LINE_COLUMNS)),
        *_transposed(events, len(_EVENT_COLUMNS)),
    ]


def _transposed(rows: list[tuple[Any, ...]], width: int) -> list[list[Any]]:
    if any(len(row) != width for row in rows):
        raise ValueError("a row does not match its columns")
    if not rows:
        return [[] for _ in range(width)]
    return [list(column) for column in zip(*rows, strict=True)]


async def insert_many_unless_claimed(conn: Connection, items: Sequence[KeyedNew]) -> list[Claimed]:
    """One :class:`Claimed` per item, in order, from one autocommit statement (see the module).
    Raises what the statement raised (nothing written) — ``asyncpg.ForeignKeyViolationError``
    for an unknown customer, ``asyncpg.UniqueViolationError`` for a key committed meanwhile."""
    if not items:
        return []
    if conn.is_in_transaction():
        raise RuntimeError("insert_many_unless_claimed is a whole transaction by itself")
    keys = {(item.record.client_id, item.record.key) for item in items}
    if len(keys) != len(items):
        raise ValueError("two requests of one group share a key")
    rows = await conn.fetch(INSERT_GROUP, *_columns(items))
    if [row[0] for row in rows] != list(range(len(items))):
        raise RuntimeError("insert_many_unless_claimed answered for other requests")
    return [
        claimed_from(row[1:], item.invoice, item.events, statement="insert_many_unless_claimed")
        for item, row in zip(items, rows, strict=True)
    ]


async def insert_unless_claimed(conn: Connection, items: Sequence[KeyedNew]) -> list[Claimed]:
    """:func:`insert_many_unless_claimed`, or for one request its own statement
    (``subscriptions.insert_new_unless_claimed``, which also names an unknown customer)."""
    if len(items) != 1:
        return await insert_many_unless_claimed(conn, items)
    (item,) = items
    claimed = await insert_new_unless_claimed(
        conn,
        item.sub,
        item.invoice,
        item.lines,
        item.events,
        now=item.now,
        audit_entry=item.audit_entry,
        record=item.record,
    )
    return [claimed]
