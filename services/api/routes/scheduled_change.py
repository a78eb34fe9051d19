"""Drop a plan change scheduled for the period end: ``DELETE
/subscriptions/{id}/scheduled-change`` (``change-plan`` with ``effective: period_end`` makes
one)."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

from billing_core.usecases import change_plan as change_plan_uc
from services.api.routes.common import problems
from services.api.routes.subscription_change import SubscriptionChange
from services.api.schemas import SubscriptionOut

router = APIRouter(tags=["subscriptions"])


@router.delete(
    "/subscriptions/{id}/scheduled-change",
    response_model=SubscriptionOut,
    summary="Drop the plan change scheduled for the period end",
    description="The subscription renews at its current plan again (scheduledChange null). "
    "Nothing scheduled: succeeds without change. A canceled subscription: 409 "
    "state-conflict. If-Match: the expected version.",
    responses=problems(400, 401, 403, 404, 409, 422, 429, 503),
)
async def cancel_scheduled_change(change: SubscriptionChange) -> Response:
    return await change.run(change_plan_uc.cancel_scheduled_change, None)
