"""Undo a scheduled cancel: ``POST /subscriptions/{id}/resume-renewal``."""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.responses import Response

from billing_core.repo import subscriptions as subscriptions_repo
from billing_core.usecases import cancel as cancel_uc
from services.api.idempotency import Outcome, SubscriptionsWrite
from services.api.routes.common import etag, expected_version, outcome, problems
from services.api.routes.subscriptions import IfMatch, SubscriptionId
from services.api.schemas import ResumeRenewalRequest, SubscriptionOut

router = APIRouter(tags=["subscriptions"])


@router.post(
    "/subscriptions/{id}/resume-renewal",
    response_model=SubscriptionOut,
    summary="Undo a cancel scheduled for the period end",
    description="Clears cancelAtPeriodEnd: the subscription renews at its period end again (a "
    "trial ends into its first paid period again). Without a scheduled cancel it succeeds "
    "without change. A canceled subscription is over: 409 state-conflict.",
    responses=problems(400, 401, 403, 404, 409, 413, 422, 429, 503),
)
async def resume_renewal(
    subscription_id: SubscriptionId,
    body: ResumeRenewalRequest,
    write: SubscriptionsWrite,
    if_match: IfMatch = None,
) -> Response:
    expected = expected_version(if_match, body.expected_version)

    async def work(session: AsyncSession, now: datetime) -> Outcome:
        await cancel_uc.resume_renewal(
            session,
            subscription_id=subscription_id,
            expected_version=expected,
            now=now,
            actor=write.actor,
        )
        sub = await subscriptions_repo.get(session, subscription_id)
        return outcome(200, SubscriptionOut.of(sub), etag=etag(sub.version))

    return await write.run(work, expected_version=expected)
