"""The renewer's loop body: one batch per tick, in its own transaction.

The tick claims a batch, renews it and commits; with ``concurrency`` > 1 it runs that many
batches at once on separate connections (SKIP LOCKED keeps them disjoint), so the Python side of
one batch overlaps the database side of the other. Then it gives the invoices and credit notes
still without a document number theirs (:mod:`billing_core.usecases.numbering`, in its own short
transaction). It asks for another tick right away while the batches come back full (or a
subscription is still catching up), otherwise the worker sleeps for the poll interval. Each tick
first writes the due SubscriptionTrialWillEnd notices; TRIALING subscriptions are claimed like
ACTIVE ones once their trial is over (the renewal invoices period 0). PAST_DUE subscriptions are
never claimed (the due index holds ACTIVE and TRIALING rows only): they are renewed once a
payment returns them to ACTIVE, catching up every period they missed.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

from billing_core.clock import Clock
from billing_core.db import pg
from billing_core.logging import get_logger
from billing_core.repo import renewal as renewal_repo
from billing_core.usecases.numbering import NumberingResult, number_documents
from billing_core.usecases.pause import resume_due_pauses
from billing_core.usecases.renew import BatchResult, renew_due_batch
from billing_core.usecases.trial_notices import DEFAULT_LEAD, send_trial_notices
from services.renewer import metrics

log = get_logger(__name__)


class Renewer:
    def __init__(
        self,
        pool: pg.LazyPool,
        clock: Clock,
        *,
        batch_size: int,
        max_periods_per_row: int = 24,
        backlog_refresh_seconds: float = 5.0,
        concurrency: int = 1,
        trial_will_end_lead: timedelta = DEFAULT_LEAD,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        self._concurrency = concurrency
        self._trial_lead = trial_will_end_lead
        self._pool = pool
        self._clock = clock
        self._batch_size = batch_size
        # A numbering pass per tick keeps up with the tick's batches.
        self._numbering_limit = batch_size * concurrency
        self._max_periods = max_periods_per_row
        self._backlog_refresh = backlog_refresh_seconds
        self._backlog_counted_at: float | None = None
        self.parked: set[int] = set()
        self.last_result: BatchResult | None = None
        self.numbered = NumberingResult(0, 0)  # documents this renewer numbered so far

    async def tick(self) -> bool:
        """Renew ``concurrency`` batches at once (each its own transaction and connection);
        True when more due work is probably waiting. The due trial notices go first: a trial
        is ended only once its SubscriptionTrialWillEnd is written; the pauses due to resume
        last: their paused periods are renewed (VOID or DRAFT) before they resume."""
        notices = await self._trial_notices()
        if self._concurrency == 1:
            results = [await self._batch()]
        else:
            outcomes = await asyncio.gather(
                *(self._batch() for _ in range(self._concurrency)), return_exceptions=True
            )
            for outcome in outcomes:
                if isinstance(outcome, BaseException):
                    raise outcome
            results = [o for o in outcomes if isinstance(o, BatchResult)]
        resumed = await self._resumes()
        full = (
            notices >= self._batch_size
            or resumed >= self._batch_size
            or any(r.claimed >= self._batch_size or r.still_due > 0 for r in results)
        )
        numbered = await self._number()
        limit = self._numbering_limit
        full = full or numbered.invoices >= limit or numbered.credit_notes >= limit
        await self._refresh_backlog(force=not full)
        return full

    async def _trial_notices(self) -> int:
        async with pg.transaction(await self._pool.get()) as conn:
            sent = await send_trial_notices(
                conn, now=self._clock.now(), lead=self._trial_lead, limit=self._batch_size
            )
        if sent:
            metrics.TRIAL_NOTICES.inc(sent)
            log.info("trial_will_end_notices", count=sent)
        return sent

    async def _number(self) -> NumberingResult:
        """One numbering pass in its own short transaction (after the batches: the series'
        counters stay locked only for this one)."""
        async with pg.transaction(await self._pool.get()) as conn:
            result = await number_documents(conn, limit=self._numbering_limit)
        self.numbered = NumberingResult(
            self.numbered.invoices + result.invoices,
            self.numbered.credit_notes + result.credit_notes,
        )
        metrics.DOCUMENTS_NUMBERED.labels("invoice").inc(result.invoices)
        metrics.DOCUMENTS_NUMBERED.labels("credit_note").inc(result.credit_notes)
        if result.invoices or result.credit_notes:
            log.info(
                "documents_numbered", invoices=result.invoices, credit_notes=result.credit_notes
            )
        return result

    async def _resumes(self) -> int:
        async with pg.transaction(await self._pool.get()) as conn:
            resumed = await resume_due_pauses(conn, now=self._clock.now(), limit=self._batch_size)
        if resumed:
            metrics.RESUMES.inc(resumed)
            log.info("pauses_resumed", count=resumed)
        return resumed

    async def _batch(self) -> BatchResult:
        now = self._clock.now()
        started = time.perf_counter()
        async with pg.transaction(await self._pool.get()) as conn:
            result = await renew_due_batch(
                conn,
                now=now,
                batch_size=self._batch_size,
                max_periods=self._max_periods,
                exclude_ids=sorted(self.parked),
            )
        elapsed = time.perf_counter() - started
        self.last_result = result
        metrics.BATCH_SECONDS.observe(elapsed)
        metrics.BATCH_SIZE.observe(result.claimed)
        metrics.INVOICES_CREATED.inc(result.invoices_created)
        metrics.ZERO_AMOUNT_INVOICES.inc(result.zero_amount_invoices)
        metrics.CANCELLATIONS.inc(result.canceled)
        metrics.ALREADY_INVOICED.inc(result.already_invoiced)
        if result.parked:
            self.parked.update(result.parked)
            metrics.PARKED.set(len(self.parked))
        if result.claimed:
            log.info(
                "renewal_batch",
                claimed=result.claimed,
                invoices=result.invoices_created,
                zero_amount=result.zero_amount_invoices,
                canceled=result.canceled,
                already_invoiced=result.already_invoiced,
                parked=len(result.parked),
                still_due=result.still_due,
                duration_ms=round(elapsed * 1000, 1),
            )
        return result

    async def _refresh_backlog(self, *, force: bool) -> None:
        mono = time.monotonic()
        if (
            not force
            and self._backlog_counted_at is not None
            and mono - self._backlog_counted_at < self._backlog_refresh
        ):
            return
        self._backlog_counted_at = mono
        async with (await self._pool.get()).acquire() as conn:
            metrics.DUE_BACKLOG.set(await renewal_repo.count_due(conn, now=self._clock.now()))
