"""Pause and resume collection: ``POST /subscriptions/{id}/pause`` and ``/resume``."""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.responses import Response

from billing_core.domain.subscription import PauseBehavior
from billing_core.repo import subscriptions as subscriptions_repo
from billing_core.usecases import pause as pause_uc
from services.api.idempotency import Outcome, SubscriptionsWrite
from services.api.routes.common import etag, expected_version, outcome, problems
from services.api.routes.subscriptions import IfMatch, SubscriptionId
from services.api.schemas import PauseRequest, ResumeRequest, SubscriptionOut

router = APIRouter(tags=["subscriptions"])


async def _answer(session: AsyncSession, subscription_id: int) -> Outcome:
    sub = await subscriptions_repo.get(session, subscription_id)
    return outcome(200, SubscriptionOut.of(sub), etag=etag(sub.version))


@router.post(
    "/subscriptions/{id}/pause",
    response_model=SubscriptionOut,
    summary="Pause collection",
    description="The status is unchanged and periods keep renewing, but the renewal invoices "
    "of periods that start while paused (before resumesAt) are created VOID (behavior void) or "
    "DRAFT (keep_as_draft), and no invoice of the subscription is collected: an OPEN one (in "
    "dunning too) waits, and is retried when collection resumes. resumesAt: it resumes by "
    "itself then. Pausing again changes the behavior or resumesAt (the same pause: no change). "
    "A canceled subscription, or one in its trial: 409 state-conflict; a resumesAt not in the "
    "future: 422.",
    responses=problems(400, 401, 403, 404, 409, 413, 422, 429, 503),
)
async def pause_subscription(
    subscription_id: SubscriptionId,
    body: PauseRequest,
    write: SubscriptionsWrite,
    if_match: IfMatch = None,
) -> Response:
    expected = expected_version(if_match, body.expected_version)

    async def work(session: AsyncSession, now: datetime) -> Outcome:
        await pause_uc.pause(
            session,
            subscription_id=subscription_id,
            behavior=PauseBehavior(body.behavior),
            resumes_at=body.resumes_at,
            expected_version=expected,
            now=now,
            actor=write.actor,
        )
        return await _answer(session, subscription_id)

    return await write.run(work, expected_version=expected)


@router.post(
    "/subscriptions/{id}/resume",
    response_model=SubscriptionOut,
    summary="Resume collection",
    description="Ends a pause: the next renewals are collected, and so are the OPEN invoices "
    "held during the pause (a retry that fell due meanwhile is made at once). The periods "
    "renewed while paused keep their VOID or DRAFT invoices. Not paused: succeeds without "
    "change. A canceled subscription: 409 state-conflict.",
    responses=problems(400, 401, 403, 404, 409, 413, 422, 429, 503),
)
async def resume_subscription(
    subscription_id: SubscriptionId,
    body: ResumeRequest,
    write: SubscriptionsWrite,
    if_match: IfMatch = None,
) -> Response:
    expected = expected_version(if_match, body.expected_version)

    async def work(session: AsyncSession, now: datetime) -> Outcome:
        await pause_uc.resume(
            session,
            subscription_id=subscription_id,
            expected_version=expected,
            now=now,
            actor=write.actor,
        )
        return await _answer(session, subscription_id)

    return await write.run(work, expected_version=expected)
