"""The collector's refund loop: sends the REQUESTED refunds, through the same global rate limit
and call window as the charges (the gateway counts every call), each with its fixed key.

A refund is leased like an invoice (``repo.refunds.claim_due_refunds``, committed before the
call): a process that dies before the call, during it or before recording the answer leaves it
to come due again when the lease ends, and the next try sends the same key — the gateway
answers with the first refund instead of making a second one. An uncertain answer is asked
again after ``unknown_retry`` (same key), while it has had fewer than ``unknown_max_retries``
uncertain answers and was requested less than ``unknown_max_age`` ago (the gateway keeps a key
for a limited time: past it, a retry could refund twice), then goes to a person.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

from billing_core.clock import Clock
from billing_core.db import pg
from billing_core.db.pg import LazyPool
from billing_core.domain.refund import RefundAnswer, RefundOutcome, RefundState
from billing_core.gateway import NotSent, PaymentGateway, RefundResult
from billing_core.logging import get_logger
from billing_core.ratelimit import GlobalRateLimiter
from billing_core.repo.refunds import claim_due_refunds
from billing_core.usecases.refunds import record_refund_answer
from services.collector import metrics
from services.collector.settings import CollectorSettings
from services.collector.window import CallWindow

log = get_logger(__name__)


BATCH_SIZE = 20  # refunds claimed at once


class RefundSender:
    """Its figures come from ``settings``, as the collector's do."""

    def __init__(
        self,
        settings: CollectorSettings,
        *,
        pool: LazyPool,
        gateway: PaymentGateway,
        limiter: GlobalRateLimiter,
        window: CallWindow,
        clock: Clock,
        stopping: asyncio.Event,
    ) -> None:
        self._pool = pool
        self._gateway = gateway
        self._limiter = limiter
        self._window = window
        self._clock = clock
        self._clock_offset = timedelta(seconds=settings.clock_offset_seconds)
        self._policy = settings.dunning_policy()
        self._lease = timedelta(seconds=settings.collector_lease_seconds)
        self._stopping = stopping
        self._unauthorized_pause = settings.collector_unauthorized_pause_seconds

    async def send_due(self) -> int:
        """Claim the due refunds and send them (concurrently, each at its own send slot);
        returns how many were sent. Nothing is claimed while the limiter is closed (Redis
        down: fail closed, as for charges) or the process is stopping."""
        if self._stopping.is_set() or self._limiter.closed:
            return 0
        async with pg.transaction(await self._pool.get()) as conn:
            due = await claim_due_refunds(
                conn,
                clock_offset=self._clock_offset,
                limit=BATCH_SIZE,
                lease=self._lease,
            )
        if not due:
            return 0
        results = await asyncio.gather(
            *(self._send(refund) for refund in due), return_exceptions=True
        )
        for refund, result in zip(due, results, strict=True):
            if isinstance(result, BaseException):  # its lease ends; it is sent again, same key
                log.warning("refund_send_failed", refund_id=refund.id, error=repr(result))
        return sum(1 for result in results if result is True)

    async def _send(self, refund: RefundState) -> bool:
        if refund.charge_reference is None:
            await self._record(refund, RefundAnswer(RefundOutcome.FAILED, error="no charge id"))
            return False
        result = await self._call(refund, refund.charge_reference)
        if result is None:
            return False
        metrics.REFUNDS.labels(str(result.outcome)).inc()
        if result.unauthorized:
            # Our credentials, not this refund: nothing recorded, it comes due again when its
            # lease ends (same key); every replica pauses, as for a charge.
            metrics.UNAUTHORIZED.inc()
            log.error("gateway_refuses_credentials_refund", refund_id=refund.id)
            await self._pause(self._unauthorized_pause)
            return True
        if result.rate_limited:
            metrics.RATE_LIMITED.inc()
            await self._window.on_rate_limited()
            await self._pause(min(result.retry_after_seconds or 1.0, 60.0))
        answer = RefundAnswer(result.outcome, result.gateway_reference, result.error)
        await self._record(refund, answer)
        return True

    async def _call(self, refund: RefundState, charge_reference: str) -> RefundResult | None:
        """At a send slot of the shared limit, with a place in the window; None when the lease
        got too old to make the call."""
        lease_until = self._clock.now() + self._lease
        async with self._gateway.connection() as connection:
            while True:
                await self._window.wait_for_room()
                slot = await self._limiter.reserve()
                await self._limiter.wait_until(slot)
                if not self._limiter.usable(slot) or not self._window.take():
                    continue
                if self._clock.now() > lease_until - self._lease / 2:
                    await self._window.release(None)
                    return None
                started = time.monotonic()
                latency: float | None = None
                try:
                    result = await connection.refund(
                        charge_reference,
                        refund.amount,
                        refund.currency,
                        refund.idempotency_key,
                        send_by=slot.latest,
                    )
                    latency = time.monotonic() - started
                    return result
                except NotSent:
                    self._limiter.late_drops += 1
                except BaseException:
                    latency = time.monotonic() - started
                    raise
                finally:
                    await self._window.release(latency)

    async def _record(self, refund: RefundState, answer: RefundAnswer) -> None:
        async with pg.transaction(await self._pool.get()) as conn:
            after = await record_refund_answer(
                conn,
                refund.id,
                answer,
                now=self._clock.now(),
                policy=self._policy,
            )
        log.info(
            "refund_answer_recorded",
            refund_id=refund.id,
            invoice_id=refund.invoice_id,
            key=refund.idempotency_key,
            outcome=str(answer.outcome),
            status=None if after is None else str(after.status),
            error=answer.error,
        )

    async def _pause(self, seconds: float) -> None:
        try:
            await self._limiter.pause(seconds)
        except Exception as exc:
            log.warning("refund_pause_failed", error=repr(exc))
