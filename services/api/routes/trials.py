"""Trials: ``POST /subscriptions/{id}/end-trial`` (the renewer ends them at their end)."""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.responses import Response

from billing_core.repo import subscriptions as subscriptions_repo
from billing_core.usecases import trials as trials_uc
from services.api.idempotency import Outcome, SubscriptionsWrite
from services.api.routes.common import etag, expected_version, outcome, problems
from services.api.routes.subscriptions import IfMatch, SubscriptionId
from services.api.schemas import EndTrialOut, EndTrialRequest, SubscriptionOut

router = APIRouter(tags=["subscriptions"])


@router.post(
    "/subscriptions/{id}/end-trial",
    response_model=EndTrialOut,
    summary="End the trial now and start paying",
    description="The trial ends now, which becomes the billing anchor: period 0 starts now and "
    "its invoice is created (OPEN, due at once). A cancel scheduled during the trial is "
    "dropped. Only a TRIALING subscription (else 409 state-conflict).",
    responses=problems(400, 401, 403, 404, 409, 413, 422, 429, 503),
)
async def end_trial(
    subscription_id: SubscriptionId,
    body: EndTrialRequest,
    write: SubscriptionsWrite,
    if_match: IfMatch = None,
) -> Response:
    expected = expected_version(if_match, body.expected_version)

    async def work(session: AsyncSession, now: datetime) -> Outcome:
        invoice_id = await trials_uc.end_trial_now(
            session,
            subscription_id=subscription_id,
            expected_version=expected,
            now=now,
            actor=write.actor,
        )
        sub = await subscriptions_repo.get(session, subscription_id)
        return outcome(
            200,
            EndTrialOut(invoice_id=invoice_id, subscription=SubscriptionOut.of(sub)),
            etag=etag(sub.version),
        )

    return await write.run(work, expected_version=expected)
