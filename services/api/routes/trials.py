"""Trials: ``POST /subscriptions/{id}/end-trial`` (the renewer ends them at their end)."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

from billing_core.usecases import trials as trials_uc
from services.api.routes.common import problems
from services.api.routes.subscription_change import SubscriptionChange
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
async def end_trial(body: EndTrialRequest, change: SubscriptionChange) -> Response:
    return await change.run(trials_uc.end_trial_now, body.expected_version, _ended)


def _ended(invoice_id: int, subscription: SubscriptionOut) -> EndTrialOut:
    return EndTrialOut(invoice_id=invoice_id, subscription=subscription)
