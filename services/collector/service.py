"""The collector's work: claim + lease, wait for a permit, call the gateway, record the result.

Three separate steps, never one transaction: (1) a short transaction claims and leases a batch;
(2) each invoice waits for a global permit and calls the gateway with
``inv-{id}-try-{attemptCount}`` — after an uncertain answer for that key, it first asks the
gateway what happened to it (a look-up, through the same permits), and calls only if the gateway
never saw the key; (3) the result is recorded in its own transaction. Many calls are in flight
at once (bounded), so one replica can keep a 200 calls/s gateway busy at 300 ms latency.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Generic, TypeVar

import redis.asyncio as aioredis

from billing_core.clock import Clock
from billing_core.db import pg
from billing_core.db.pg import LazyPool
from billing_core.domain.charge_result import NOTHING_CHARGED, ChargeOutcome, GatewayReport
from billing_core.gateway import (
    ChargeResult,
    GatewayConnection,
    LookupResult,
    NotSent,
    PaymentGateway,
)
from billing_core.logging import get_logger
from billing_core.ratelimit import GlobalRateLimiter, Slot
from billing_core.repo.collection import (
    LeasedInvoice,
    claim_due_invoices,
    due_backlog_at,
    key_calls,
    release_void_requested,
    still_ours_to_charge,
)
from billing_core.runtime.batcher import Batcher
from billing_core.usecases.payment_result import AttemptToRecord, RecordOutcome
from services.collector import metrics
from services.collector.recording import GroupRecorder
from services.collector.settings import CollectorSettings
from services.collector.window import CallWindow

log = get_logger(__name__)

T = TypeVar("T")

_LOOKUP_LABELS = {
    ChargeOutcome.SUCCESS: "succeeded",
    ChargeOutcome.DECLINED: "declined",
    ChargeOutcome.UNKNOWN: "unknown",
}


@dataclass(frozen=True)
class Sent(Generic[T]):
    """A call's answer and the instant it was sent (the process clock, as ``recorded_at``)."""

    answer: T
    at: datetime


# A slot missed (window full, check too slow) is retried with the same pre-call check while it
# is this fresh; an older one is read again.
CHECK_FRESH_SECONDS = 0.25


class Collector:
    """Its figures come from ``settings``; the keyword arguments are what it shares with the rest
    of the process (the driver pool, the gateway, the limit and window shared with the refunds)."""

    def __init__(
        self,
        settings: CollectorSettings,
        *,
        pool: LazyPool,
        gateway: PaymentGateway,
        limiter: GlobalRateLimiter,
        window: CallWindow,
        redis: aioredis.Redis,
        clock: Clock,
        stopping: asyncio.Event,
    ) -> None:
        # Leases are read and written on the database's clock, moved by the shared offset.
        self._clock_offset = timedelta(seconds=settings.clock_offset_seconds)
        # One-statement reads run outside any transaction (no BEGIN/COMMIT round trips).
        self._pool = pool
        self._key_prefix = settings.gateway_key_prefix
        self._unauthorized_pause = settings.collector_unauthorized_pause_seconds
        self._gateway = gateway
        self._limiter = limiter
        self._late_permits_counted = 0  # of limiter.late_drops, already added to the counter
        self._granted_counted = 0  # of limiter.granted, likewise
        self._redis = redis
        self._clock = clock
        self._policy = settings.dunning_policy()
        self._rng = random.Random(settings.collector_rng_seed)
        self._batch_size = settings.collector_batch_size
        self._max_in_flight = settings.collector_max_in_flight
        # Claims are made in chunks of at least this many invoices (a quarter of what may be in
        # flight): one claim per freed place would cost a transaction per call.
        self._refill = max(1, min(self._batch_size, self._max_in_flight // 4))
        self._window = window
        self._lease = timedelta(seconds=settings.collector_lease_seconds)
        # A permit obtained closer than this to the end of the lease is not used: the call could
        # outlive the lease, when another replica may already retry the invoice.
        self._call_budget = timedelta(seconds=settings.collector_call_seconds + 1)
        # Set on SIGTERM: no new claim after it, even by a tick already waiting for a free slot.
        self._stopping = stopping
        self._in_flight: set[asyncio.Task[None]] = set()
        self._slot_freed = asyncio.Event()
        # The calls in flight record their results, and read their pre-call checks, in groups:
        # a few statements per group instead of a few per call. A check waits for others until
        # ``check_lead`` before the earliest send slot in its group (slots are reserved up to
        # the limiter's horizon ahead, so the checks of a few grants are read together).
        self._recorder = GroupRecorder(
            pool=pool,
            clock=clock,
            policy=self._policy,
            rng=self._rng,
            key_prefix=self._key_prefix,
        )
        group_max = settings.collector_group_max
        self._results = Batcher(
            self._record_group, max_size=group_max, max_wait=settings.collector_group_wait_ms / 1000
        )
        self._checks = Batcher(self._check_group, max_size=group_max, max_wait=CHECK_FRESH_SECONDS)
        self._check_lead = settings.collector_check_lead_ms / 1000

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    async def tick(self) -> bool:
        """Claim what free slots allow, once a chunk of them is free; True when more work may
        be waiting right now."""
        while (
            len(self._in_flight) > self._max_in_flight - self._refill
            and not self._stopping.is_set()
        ):
            self._slot_freed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._slot_freed.wait(), timeout=1.0)
        if self._stopping.is_set() or not await self._limiter_reachable():
            return False
        want = min(self._batch_size, self._max_in_flight - len(self._in_flight))
        async with pg.transaction(await self._pool.get()) as conn:
            leased = await claim_due_invoices(
                conn,
                clock_offset=self._clock_offset,
                limit=want,
                lease=self._lease,
                key_prefix=self._key_prefix,
            )
        for invoice in leased:
            task = asyncio.create_task(self._charge(invoice), name=f"charge-{invoice.id}")
            self._in_flight.add(task)
            task.add_done_callback(self._done)
        metrics.IN_FLIGHT.set(len(self._in_flight))
        return len(leased) == want

    def _done(self, task: asyncio.Task[None]) -> None:
        self._in_flight.discard(task)
        metrics.IN_FLIGHT.set(len(self._in_flight))
        self._slot_freed.set()
        if not task.cancelled() and task.exception() is not None:
            log.error("charge_task_failed", error=repr(task.exception()))

    async def _limiter_reachable(self) -> bool:
        """Fail closed: no claim (and so no call) while Redis does not answer."""
        try:
            await self._redis.ping()
        except Exception as exc:
            if not self._limiter.closed:
                log.warning("redis_unreachable_pausing_collection", error=repr(exc))
            self._limiter.closed = True
            metrics.LIMITER_CLOSED.set(1)
            return False
        metrics.LIMITER_CLOSED.set(1 if self._limiter.closed else 0)
        return True

    async def _charge(self, invoice: LeasedInvoice) -> None:
        if invoice.void_requested:
            await self._settle_void_request(invoice)
            return
        if invoice.uncertain_before and await self._settled_by_lookup(invoice):
            return
        sent = await self._send(invoice, self._charge_call(invoice))
        if sent is None:
            return
        result = sent.answer
        metrics.CALLS.labels(str(result.outcome)).inc()
        if result.unauthorized:
            await self._on_unauthorized(invoice, result.http_status)
            return
        if result.rate_limited:
            await self._on_rate_limited(result.retry_after_seconds)
        sent_at = None if result.unsent else sent.at
        await self._record(invoice, _charge_report(invoice, result), result.error, sent_at)

    async def _settled_by_lookup(self, invoice: LeasedInvoice) -> bool:
        """The gateway answered this key uncertainly before: ask it what happened first. True
        when that settled the call (its result recorded, with source LOOKUP), or when there is
        nothing more to do under this lease; False when the gateway never saw the key, so the
        call is made now — with the same key: should the earlier request still reach the
        gateway, the key makes it and this call one charge."""
        sent = await self._send(invoice, self._lookup_call(invoice))
        return sent is None or await self._settled_by(invoice, sent)

    async def _settled_by(self, invoice: LeasedInvoice, sent: Sent[LookupResult]) -> bool:
        """What a look-up found, recorded; False when the gateway never saw the key."""
        found = sent.answer
        if found.outcome is None:  # never seen
            metrics.LOOKUPS.labels("not_found").inc()
            log.info("lookup_never_seen", invoice_id=invoice.id, key=invoice.idempotency_key)
            return False
        metrics.LOOKUPS.labels(_LOOKUP_LABELS[found.outcome]).inc()
        if found.unauthorized:
            await self._on_unauthorized(invoice, found.http_status)
            return True
        if found.rate_limited:
            await self._on_rate_limited(found.retry_after_seconds)
        await self._record(invoice, _lookup_report(invoice, found), found.error, sent.at)
        return True

    async def _settle_void_request(self, invoice: LeasedInvoice) -> None:
        """Canceled while a call may have been at the gateway (its answer was uncertain, or
        its lease ended without one): never charged again, only looked up. Charged: VOID and
        refunded; declined, or no charge under the key: VOID (recorded as a decline,
        ``NOTHING_CHARGED``); the look-up uncertain too: asked again later, within the bound.

        A charge whose id an answer or a webhook gave is looked up by that id. "No charge
        under the key" from an index that trails the gateway's writes (Stripe's search) counts
        only once that lag has passed since the last call under the key; until then it is one
        more uncertain answer, and the invoice stays OPEN with its void requested."""
        try:
            async with (await self._pool.get()).acquire() as conn:
                calls = await key_calls(conn, invoice)
        except Exception as exc:  # the lease ends and the invoice is claimed again
            log.warning("key_calls_read_failed", invoice_id=invoice.id, error=repr(exc))
            return
        if calls is None:
            return
        sent = await self._send(invoice, self._lookup_call(invoice, calls.reference))
        if sent is None:
            return
        found = sent.answer
        if found.never_seen and not found.never_seen_since(calls.last_call_at, self._clock.now()):
            trusted_from = (calls.last_call_at + found.index_lag).isoformat()
            found = LookupResult(
                ChargeOutcome.UNKNOWN,
                http_status=found.http_status,
                error=f"lookup: not found, but the gateway's index may lag until {trusted_from}",
            )
        if await self._settled_by(invoice, Sent(found, sent.at)):
            return
        report = GatewayReport(
            attempt_number=invoice.attempt_count,
            outcome=ChargeOutcome.DECLINED,
            from_webhook=False,
            from_lookup=True,
            idempotency_key=invoice.idempotency_key,
            decline_code=NOTHING_CHARGED,
        )
        await self._record(invoice, report, None, sent.at)

    def _charge_call(
        self, invoice: LeasedInvoice
    ) -> Callable[[GatewayConnection, float], Awaitable[ChargeResult]]:
        def call(connection: GatewayConnection, send_by: float) -> Awaitable[ChargeResult]:
            return connection.charge(
                invoice.customer_id,
                invoice.amount,
                invoice.currency,
                invoice.idempotency_key,
                {
                    "invoiceId": invoice.id,
                    "attempt": invoice.attempt_count,
                    "subscriptionId": invoice.subscription_id,
                },
                send_by=send_by,
            )

        return call

    def _lookup_call(
        self, invoice: LeasedInvoice, reference: str | None = None
    ) -> Callable[[GatewayConnection, float], Awaitable[LookupResult]]:
        def call(connection: GatewayConnection, send_by: float) -> Awaitable[LookupResult]:
            return connection.lookup(invoice.idempotency_key, reference=reference, send_by=send_by)

        return call

    async def _send(
        self, invoice: LeasedInvoice, request: Callable[[GatewayConnection, float], Awaitable[T]]
    ) -> Sent[T] | None:
        """A place in the window, a connection, a send slot, the check that the invoice is still
        ours (read while the slot comes, so it is fresh and does not delay the call), then the
        call (a charge or a look-up: both count against the gateway's limit) at the slot; None
        when the invoice changed or the lease got too old to call."""
        started = time.monotonic()
        await self._window.wait_for_room()
        async with self._gateway.connection() as connection:
            while (slot := await self._take_a_slot(invoice)) is not None:
                metrics.LIMITER_WAIT.observe(time.monotonic() - started)
                # The lease's end on this process's monotonic clock (the lease itself is on the
                # database's): a call that could outlive it is not made.
                if time.monotonic() > invoice.lease_deadline - self._call_budget.total_seconds():
                    await self._window.release(None)
                    metrics.ABANDONED.inc()
                    log.warning("lease_too_old_skipping_call", invoice_id=invoice.id)
                    return None
                try:
                    return await self._call(connection, slot, request)
                except NotSent:  # the process stalled between the slot and the send
                    self._limiter.late_drops += 1
            return None

    async def _take_a_slot(self, invoice: LeasedInvoice) -> Slot | None:
        """Wait for a usable send slot and a place in the window (taken); None when the
        invoice is no longer ours to charge. A slot that comes with the window full, or that
        the check made us miss, goes unused."""
        checked_at = -CHECK_FRESH_SECONDS
        while True:
            await self._window.wait_for_room()
            slot = await self._limiter.reserve()
            if time.monotonic() - checked_at > CHECK_FRESH_SECONDS:
                if not await self._checked_by(slot, invoice):
                    return None
                checked_at = time.monotonic()
            else:
                await self._limiter.wait_until(slot)
            if not self._limiter.usable(slot):
                continue
            if self._window.take():
                metrics.SEND_LATENESS.observe(time.monotonic() - slot.send_at)
                return slot
            metrics.WINDOW_FULL_SLOTS.inc()

    async def _call(
        self,
        connection: GatewayConnection,
        slot: Slot,
        request: Callable[[GatewayConnection, float], Awaitable[T]],
    ) -> Sent[T]:
        """The call, sent no later than the slot allows (or not at all: ``NotSent``)."""
        sent_at = self._clock.now()
        call_started = time.monotonic()
        latency: float | None = None
        try:
            result = await request(connection, slot.latest)
            latency = time.monotonic() - call_started
            metrics.CALL_SECONDS.observe(latency)
            return Sent(result, sent_at)
        except NotSent:
            raise
        except BaseException:  # cancelled mid-call: it was sent
            latency = time.monotonic() - call_started
            raise
        finally:
            if latency is not None and self._window.is_late(latency):
                await self._use_up_a_slot()
            await self._window.release(latency)
            metrics.WINDOW.set(self._window.size)

    async def _checked_by(self, slot: Slot, invoice: LeasedInvoice) -> bool:
        """The check, read while waiting for ``slot`` (with the other checks due before it,
        ``check_lead`` ahead of it): whichever takes longer."""
        read_by = asyncio.get_running_loop().time() + slot.send_at - time.monotonic()
        check = asyncio.ensure_future(self._still_ours(invoice, read_by - self._check_lead))
        try:
            await self._limiter.wait_until(slot)
            if not check.done():
                metrics.CHECK_AFTER_SLOT.inc()
            return await check
        finally:
            check.cancel()

    async def _still_ours(self, invoice: LeasedInvoice, read_by: float) -> bool:
        """Looked at once the send slot is known, at most a horizon before it (the wait in the
        queue for a slot may be long), read by ``read_by`` (the event loop's clock): a cancel
        meanwhile voided the invoice, and the card must not be charged. A check that fails
        (database down) skips the call: the lease runs out and the invoice is tried again, with
        the same key."""
        try:
            ours = await self._checks.submit(invoice, close_by=read_by)
        except Exception as exc:
            log.warning("lease_check_failed_skipping_call", invoice_id=invoice.id, error=repr(exc))
            return False
        if not ours:
            metrics.SKIPPED.inc()
            log.info("invoice_changed_skipping_call", invoice_id=invoice.id)
            await self._release_if_void_requested(invoice)
        return ours

    async def _release_if_void_requested(self, invoice: LeasedInvoice) -> None:
        """Canceled before its call was sent: the lease ends now, so the invoice is claimed again
        at once and settled by a look-up (``_settle_void_request``), not when the lease would
        have ended."""
        try:
            async with pg.transaction(await self._pool.get()) as conn:
                await release_void_requested(conn, invoice, now=self._clock.now())
        except Exception as exc:  # the void is decided when the lease ends anyway
            log.warning("void_request_release_failed", invoice_id=invoice.id, error=repr(exc))

    async def _check_group(self, invoices: Sequence[LeasedInvoice]) -> list[bool]:
        metrics.CHECK_GROUP.observe(len(invoices))
        async with (await self._pool.get()).acquire() as conn:
            ours = await still_ours_to_charge(conn, invoices)
        return [invoice.id in ours for invoice in invoices]

    async def _use_up_a_slot(self) -> None:
        """A late answer may mean the gateway held the call and counted it late, on arrival:
        with the answers of a stall, a window of calls lands in one second. Each such call uses
        up a send slot of the shared limit before its place in the window is freed, so what
        lands late and what is sent next never add up to more than the limit."""
        metrics.LATE_ANSWERS.inc()
        try:
            await self._limiter.use_up(1)
        except Exception as exc:
            log.warning("late_answer_slot_not_used_up", error=repr(exc))

    async def _on_unauthorized(self, invoice: LeasedInvoice, http_status: int | None) -> None:
        """Fail closed: revoked or wrong credentials are the operator's problem, not the
        invoice's. Nothing is recorded (the invoice keeps its attempt and comes due again when
        the lease ends), and every replica pauses, probing once a pause."""
        metrics.UNAUTHORIZED.inc()
        log.error(
            "gateway_refuses_credentials_pausing_all_replicas",
            http_status=http_status,
            invoice_id=invoice.id,
            pause_seconds=self._unauthorized_pause,
        )
        try:
            await self._limiter.pause(self._unauthorized_pause)
        except Exception as exc:
            log.warning("unauthorized_pause_failed", error=repr(exc))

    async def _on_rate_limited(self, retry_after: float | None) -> None:
        """A 429: every replica pauses (shared cursor in Redis) and this window halves."""
        metrics.RATE_LIMITED.inc()
        await self._window.on_rate_limited()
        try:
            await self._limiter.pause(min(retry_after or 1.0, 60.0))
        except Exception as exc:
            log.warning("rate_limit_pause_failed", error=repr(exc))

    async def _record(
        self,
        invoice: LeasedInvoice,
        report: GatewayReport,
        error: str | None,
        sent_at: datetime | None,
    ) -> None:
        """Record in its own transaction; retried while the lease lasts (e.g. a DB restart).
        ``sent_at``: when the call was sent (None: no call went out).

        If it still fails, the lease expires and the next try reuses the same key: the gateway
        replays the result, nothing is charged twice.
        """
        attempt = AttemptToRecord(invoice.id, report, error, sent_at)
        delay = 0.2
        while True:
            try:
                outcome = await self._results.submit(attempt)
                metrics.RECORDED.labels(str(outcome)).inc()
                log.debug(  # the payment_attempt row is the audit trail; this is per call
                    "charge_recorded",
                    invoice_id=invoice.id,
                    key=invoice.idempotency_key,
                    outcome=str(report.outcome),
                    source=report.source,
                    result=str(outcome),
                )
                return
            except Exception as exc:
                if time.monotonic() + delay > invoice.lease_deadline:
                    log.error(
                        "record_failed_lease_will_retry", invoice_id=invoice.id, error=repr(exc)
                    )
                    return
                log.warning("record_failed_retrying", invoice_id=invoice.id, error=repr(exc))
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def _record_group(self, attempts: Sequence[AttemptToRecord]) -> list[RecordOutcome]:
        """One transaction for the results that arrived together (``record_charge_results``
        decides exactly what recording them one by one would)."""
        metrics.RECORD_GROUP.observe(len(attempts))
        return await self._recorder.record(attempts)

    async def drain(self, timeout: float) -> None:
        """Let in-flight calls finish and be recorded (graceful shutdown)."""
        if not self._in_flight:
            return
        log.info("draining_in_flight_calls", count=len(self._in_flight))
        _, pending = await asyncio.wait(set(self._in_flight), timeout=timeout)
        for task in pending:
            task.cancel()
        if pending:
            log.warning("shutdown_cancelled_calls", count=len(pending))
            await asyncio.wait(pending, timeout=2)

    async def refresh_backlog(self) -> None:
        async with (await self._pool.get()).acquire() as conn:
            due, oldest, now = await due_backlog_at(conn, clock_offset=self._clock_offset)
        metrics.BACKLOG.set(due)
        late = self._limiter.late_drops
        metrics.LATE_PERMITS.inc(late - self._late_permits_counted)
        self._late_permits_counted = late
        granted = self._limiter.granted
        metrics.SLOTS_GRANTED.inc(granted - self._granted_counted)
        self._granted_counted = granted
        metrics.OLDEST_DUE.set((now - oldest).total_seconds() if oldest else 0)


def _charge_report(invoice: LeasedInvoice, result: ChargeResult) -> GatewayReport:
    return GatewayReport(
        attempt_number=invoice.attempt_count,
        outcome=result.outcome,
        from_webhook=False,
        idempotency_key=invoice.idempotency_key,
        decline_code=result.decline_code,
        gateway_reference=result.gateway_reference,
        rejected_because=result.error if result.rejected else None,
    )


def _lookup_report(invoice: LeasedInvoice, found: LookupResult) -> GatewayReport:
    """What the look-up said, checked against the invoice like a webhook (the amount, currency
    and customer the gateway says it charged)."""
    outcome = found.outcome if found.outcome is not None else ChargeOutcome.UNKNOWN
    return GatewayReport(
        attempt_number=invoice.attempt_count,
        outcome=outcome,
        from_webhook=False,
        from_lookup=True,
        idempotency_key=invoice.idempotency_key,
        decline_code=found.decline_code,
        gateway_reference=found.gateway_reference,
        amount=found.amount,
        currency=found.currency,
        customer_id=found.customer_id,
    )
