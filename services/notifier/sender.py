"""Sends the notifier's outbox (``notifier_email``) over SMTP.

It runs beside the Kafka consumer (a side job of the notifier process, every
``BILLING_NOTIFIER_SEND_INTERVAL_SECONDS``), so a consumer waiting for its group to rebalance
does not hold the e-mails back. Each round claims the due e-mails (a short transaction that
leases the rows) and shares them out over ``BILLING_NOTIFIER_SEND_CONNECTIONS`` SMTP connections
at once, each sending its share one at a time: count the attempt (committed), hand the message
to the server, mark it sent (committed) as soon as the server has accepted it. The connections
overlap the round trips to the server and the database that each message waits for. On SIGTERM
the messages being sent are finished and recorded, the rest given back.
What a crash can do:

* before the server accepted a message (mid-conversation): the server drops it, the row stays
  unsent, and it is sent once the lease is over;
* after acceptance, before the row is marked: the row is sent again when its lease is over. SMTP
  has no way to ask a server whether it already has a message, so this window cannot be closed
  from the sending side; it is one message per SMTP connection per crash at most, the same
  bytes with the same Message-ID, and it is logged (``email_resending_after_unknown_outcome``).
  Mailboxes that collapse copies of one Message-ID (Gmail does; so does the project's
  development server) show the customer one e-mail.

A server that does not answer is tried again every ``BILLING_NOTIFIER_SEND_RETRY_SECONDS`` (no
message reached it: nothing is given up); a temporary refusal (4xx) is retried with a doubling
delay; a permanent refusal (5xx), or ``BILLING_NOTIFIER_SEND_MAX_ATTEMPTS`` attempts, gives the
e-mail up (``failed_at``), logged and counted.
"""

from __future__ import annotations

import asyncio
from email.utils import parseaddr

import aiosmtplib
from prometheus_client import Counter

from billing_core.db import pg
from billing_core.logging import get_logger
from billing_core.repo import notifier_emails
from billing_core.repo.notifier_emails import Claimed
from services.notifier.settings import NotifierSettings

log = get_logger(__name__)

EMAILS = Counter(
    "billing_notifier_emails_total",
    "E-mails handed to the SMTP server, by result (sent, retry, failed).",
    ["result"],
)

MAX_RETRY_S = 3600.0


class Sender:
    def __init__(self, pool: pg.LazyPool, settings: NotifierSettings) -> None:
        self._pool = pool
        self._s = settings
        self._envelope_from = parseaddr(settings.notifier_mail_from)[1]
        # One per SMTP connection, held while its message is being sent and recorded.
        self._lanes = [asyncio.Lock() for _ in range(settings.notifier_send_connections)]
        self._stopping = False
        self.sent = 0
        self.resent_after_unknown_outcome = 0

    async def run(self) -> None:
        """Send rounds until one finds less than a full batch (or the process stops)."""
        while not self._stopping:
            if await self.send_due() < self._s.notifier_send_batch:
                return

    async def stop(self) -> None:
        """Send no more; wait for the messages being sent, if any, to be recorded."""
        self._stopping = True
        for busy in self._lanes:
            async with busy:
                pass

    def _client(self) -> aiosmtplib.SMTP:
        return aiosmtplib.SMTP(
            hostname=self._s.notifier_smtp_host,
            port=self._s.notifier_smtp_port,
            timeout=self._s.notifier_smtp_timeout_seconds,
            start_tls=self._s.notifier_smtp_starttls,
            username=self._s.notifier_smtp_username or None,
            password=self._s.notifier_smtp_password.get_secret_value() or None,
        )

    async def send_due(self) -> int:
        """Claim and send one batch of due e-mails; return how many were claimed."""
        async with pg.transaction(await self._pool.get()) as conn:
            claimed = await notifier_emails.claim(
                conn, limit=self._s.notifier_send_batch, lease_s=self._s.notifier_send_lease_seconds
            )
        if not claimed:
            return 0
        lanes = [claimed[n :: len(self._lanes)] for n in range(len(self._lanes))]
        async with asyncio.TaskGroup() as group:
            for busy, emails in zip(self._lanes, lanes, strict=True):
                if emails:
                    group.create_task(self._send_lane(busy, emails))
        return len(claimed)

    async def _send_lane(self, busy: asyncio.Lock, claimed: list[Claimed]) -> None:
        """Send ``claimed`` over one SMTP connection, one at a time."""
        smtp = self._client()
        try:
            await smtp.connect()
        except (aiosmtplib.SMTPException, OSError) as exc:
            for email in claimed:
                await self._failed(email, f"connect: {exc!r}", attempts=None, permanent=False)
            return
        try:
            for n, email in enumerate(claimed):
                if self._stopping:
                    async with pg.transaction(await self._pool.get()) as conn:
                        await notifier_emails.release(conn, [e.id for e in claimed[n:]])
                    break
                if not smtp.is_connected:
                    for rest in claimed[n:]:
                        await self._failed(rest, "connection lost", attempts=None, permanent=False)
                    break
                async with busy:
                    await self._send(smtp, email)
        finally:
            if smtp.is_connected:
                try:
                    await smtp.quit()
                except (aiosmtplib.SMTPException, OSError):
                    smtp.close()

    async def _send(self, smtp: aiosmtplib.SMTP, email: Claimed) -> None:
        async with pg.transaction(await self._pool.get()) as conn:
            attempt = await notifier_emails.start_attempt(conn, email.id)
        if attempt.previous_unknown:
            self.resent_after_unknown_outcome += 1
            log.warning(
                "email_resending_after_unknown_outcome",
                email_id=email.id,
                message_id=email.message_id,
                event_id=str(email.event_id),
                attempt=attempt.number,
            )
        n = attempt.number
        try:
            await smtp.sendmail(self._envelope_from, [email.recipient], email.message)
        except aiosmtplib.SMTPRecipientsRefused as exc:
            refused = exc.recipients[0] if exc.recipients else None
            permanent = refused is not None and refused.code >= 500
            await self._failed(
                email, f"recipient refused: {exc!r}", attempts=n, permanent=permanent
            )
            return
        except aiosmtplib.SMTPResponseException as exc:
            await self._failed(
                email, f"{exc.code} {exc.message}", attempts=n, permanent=exc.code >= 500
            )
            return
        except (aiosmtplib.SMTPException, OSError) as exc:
            # No answer (timeout, connection lost): the server may still have accepted it.
            await self._failed(email, repr(exc), attempts=n, permanent=False, answered=False)
            return
        async with pg.transaction(await self._pool.get()) as conn:
            await notifier_emails.mark_sent(conn, email.id)
        self.sent += 1
        EMAILS.labels(result="sent").inc()
        log.info(
            "email_sent",
            email_id=email.id,
            to=email.recipient,
            event_type=email.event_type,
            event_id=str(email.event_id),
            message_id=email.message_id,
            attempt=n,
            previous_error=attempt.previous_error,
        )

    async def _failed(
        self,
        email: Claimed,
        error: str,
        *,
        attempts: int | None,
        permanent: bool,
        answered: bool = True,
    ) -> None:
        """Record a failed attempt (``attempts``: its number; None when the message never got
        to the server, which counts as no attempt). ``answered``: the server refused it, so it
        surely does not have it; otherwise an unknown outcome stays unknown."""
        tried = attempts or 0
        give_up = permanent or tried >= self._s.notifier_send_max_attempts
        retry_s = min(self._s.notifier_send_retry_seconds * 2 ** max(tried - 1, 0), MAX_RETRY_S)
        async with pg.transaction(await self._pool.get()) as conn:
            await notifier_emails.mark_failed_attempt(
                conn,
                email.id,
                error=error,
                retry_s=retry_s,
                give_up=give_up,
                attempted=attempts is not None and answered,
            )
        EMAILS.labels(result="failed" if give_up else "retry").inc()
        (log.error if give_up else log.warning)(
            "email_given_up" if give_up else "email_send_failed",
            email_id=email.id,
            to=email.recipient,
            event_type=email.event_type,
            attempt=attempts,
            error=error,
            retry_in_s=None if give_up else retry_s,
        )
