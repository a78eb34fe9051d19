"""Undo a scheduled cancel: ``POST /subscriptions/{id}/resume-renewal``."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

from billing_core.usecases import cancel as cancel_uc
from services.api.routes.common import problems
from services.api.routes.subscription_change import SubscriptionChange
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
async def resume_renewal(body: ResumeRenewalRequest, change: SubscriptionChange) -> Response:
    return await change.run(cancel_uc.resume_renewal, body.expected_version)
