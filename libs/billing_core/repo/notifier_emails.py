"""``notifier_email``: the notifier's outbox of e-mails, and whom a subscription's e-mails go to.

Rows are written in the consumer's transaction (one per event at most: the event id is unique),
then claimed, sent and marked sent by the sender, each step its own short transaction. A claim
moves ``next_attempt_at`` a lease ahead, so rows of a sender that died are claimed again once the
lease is over. Just before a message goes to the SMTP server its attempt is counted and
``attempt_started_at`` set; recording the outcome (sent, or refused) clears it. A row claimed with
it still set had an attempt whose sender died: the server may or may not have that message.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from billing_core.db import pg
from billing_core.db.arrays import int_array
from billing_core.db.pg import Connection, Statement
from billing_core.repo.invoice_documents import Recipient

_RECIPIENT = Statement(
    """
    SELECT c.id AS customer_id, c.external_id, c.name, c.email
    FROM customer c
    WHERE c.id = COALESCE(
        (SELECT customer_id FROM notifier_recipient WHERE subscription_id = :subscription_id),
        (SELECT customer_id FROM subscription WHERE id = :subscription_id))
    """
)

_QUEUE = Statement(
    """
    INSERT INTO notifier_email (event_id, event_type, subscription_id, customer_id, recipient,
                                subject, message_id, message, next_attempt_at)
    VALUES (:event_id, :event_type, :subscription_id, :customer_id, :recipient,
            :subject, :message_id, :message, now())
    ON CONFLICT (event_id) DO NOTHING
    RETURNING id
    """
)

_CLAIM = Statement(
    """
    UPDATE notifier_email e
    SET next_attempt_at = now() + make_interval(secs => :lease_s)
    FROM (SELECT id FROM notifier_email
          WHERE sent_at IS NULL AND failed_at IS NULL AND next_attempt_at <= now()
          ORDER BY next_attempt_at, id
          LIMIT :limit
          FOR UPDATE SKIP LOCKED) AS due
    WHERE e.id = due.id
    RETURNING e.id, e.event_id, e.event_type, e.recipient, e.message_id, e.message
    """
)

_START_ATTEMPT = Statement(
    """
    UPDATE notifier_email e
    SET attempts = e.attempts + 1, attempt_started_at = now()
    FROM (SELECT id, attempt_started_at, last_error FROM notifier_email WHERE id = :id FOR UPDATE)
         AS before
    WHERE e.id = before.id
    RETURNING e.attempts, before.attempt_started_at IS NOT NULL AS previous_unknown,
              before.last_error AS previous_error
    """
)

_SENT = Statement(
    "UPDATE notifier_email SET sent_at = now(), attempt_started_at = NULL, last_error = NULL "
    "WHERE id = :id"
)

_FAILED_ATTEMPT = Statement(
    """
    UPDATE notifier_email
    SET last_error = :error,
        attempt_started_at = CASE WHEN :attempted THEN NULL ELSE attempt_started_at END,
        next_attempt_at = now() + make_interval(secs => :retry_s),
        failed_at = CASE WHEN :give_up THEN now() END
    WHERE id = :id AND sent_at IS NULL
    """
)

_RELEASE = Statement(
    "UPDATE notifier_email SET next_attempt_at = now() "
    "WHERE id = ANY(CAST(:ids AS text)::bigint[]) AND sent_at IS NULL"
)

_COUNTS = Statement(
    """
    SELECT count(*) FILTER (WHERE sent_at IS NOT NULL) AS sent,
           count(*) FILTER (WHERE sent_at IS NULL AND failed_at IS NULL) AS pending,
           count(*) FILTER (WHERE failed_at IS NOT NULL) AS failed
    FROM notifier_email
    """
)


@dataclass(frozen=True)
class QueuedEmail:
    event_id: uuid.UUID
    event_type: str
    subscription_id: int
    customer_id: int
    recipient: str
    subject: str
    message_id: str
    message: bytes


@dataclass(frozen=True)
class Claimed:
    id: int
    event_id: uuid.UUID
    event_type: str
    recipient: str
    message_id: str
    message: bytes


@dataclass(frozen=True)
class Attempt:
    number: int  # 1 for the first
    # An earlier attempt started and neither succeeded nor failed: its sender died, and the
    # SMTP server may or may not have accepted that message.
    previous_unknown: bool
    previous_error: str | None  # what the previous attempt (or connection) failed with


async def recipient_of(conn: Connection, subscription_id: int) -> Recipient | None:
    """The customer a subscription's e-mails go to: the one its SubscriptionCreated named
    (``notifier_recipient``), else the subscription's own; None when neither is known."""
    row = await pg.fetchrow(conn, _RECIPIENT, {"subscription_id": subscription_id})
    return None if row is None else Recipient(**row)


async def queue(conn: Connection, email: QueuedEmail) -> bool:
    """Add ``email`` to the outbox; False when its event already has one (nothing written)."""
    return await pg.fetchrow(conn, _QUEUE, email.__dict__) is not None


async def claim(conn: Connection, *, limit: int, lease_s: float) -> list[Claimed]:
    """Up to ``limit`` due e-mails, each leased for ``lease_s``."""
    rows = await pg.fetch(conn, _CLAIM, {"limit": limit, "lease_s": lease_s})
    return sorted((Claimed(**row) for row in rows), key=lambda c: c.id)


async def start_attempt(conn: Connection, email_id: int) -> Attempt:
    """Count an attempt at sending ``email_id``, just before handing it to the server."""
    row = await pg.fetchrow(conn, _START_ATTEMPT, {"id": email_id})
    if row is None:
        raise LookupError(f"no e-mail {email_id}")
    return Attempt(
        number=int(row["attempts"]),
        previous_unknown=bool(row["previous_unknown"]),
        previous_error=row["previous_error"],
    )


async def release(conn: Connection, email_ids: list[int]) -> None:
    """Give claimed e-mails that were not tried back (due now, for any sender)."""
    await pg.execute(conn, _RELEASE, {"ids": int_array(email_ids)})


async def mark_sent(conn: Connection, email_id: int) -> None:
    await pg.execute(conn, _SENT, {"id": email_id})


async def mark_failed_attempt(
    conn: Connection, email_id: int, *, error: str, retry_s: float, give_up: bool, attempted: bool
) -> None:
    """Record a failure. ``attempted``: the server answered this attempt with a refusal, so its
    outcome is known; otherwise (no connection, no answer) an unknown outcome stays unknown."""
    await pg.execute(
        conn,
        _FAILED_ATTEMPT,
        {
            "id": email_id,
            "error": error[:2000],
            "retry_s": retry_s,
            "give_up": give_up,
            "attempted": attempted,
        },
    )


async def counts(conn: Connection) -> dict[str, int]:
    """E-mails by state: sent, pending, failed (for status pages and tests)."""
    [row] = await pg.fetch(conn, _COUNTS)
    return {"sent": int(row["sent"]), "pending": int(row["pending"]), "failed": int(row["failed"])}
