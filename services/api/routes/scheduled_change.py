"""Drop a plan change scheduled for the period end: ``DELETE
/subscriptions/{id}/scheduled-change`` (``change-plan`` with ``effective: period_end`` makes
one)."""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.responses import Response

from billing_core.repo import subscriptions as subscriptions_repo
from billing_core.usecases import change_plan as change_plan_uc
from services.api.idempotency import Outcome, SubscriptionsWrite
from services.api.routes.common import etag, expected_version, outcome, problems
from services.api.routes.subscriptions import IfMatch, SubscriptionId
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
async def cancel_scheduled_change(
    subscription_id: SubscriptionId, write: SubscriptionsWrite, if_match: IfMatch = None
) -> Response:
    expected = expected_version(if_match, None)

    async def work(session: AsyncSession, now: datetime) -> Outcome:
        await change_plan_uc.cancel_scheduled_change(
            session,
            subscription_id=subscription_id,
            expected_version=expected,
            now=now,
            actor=write.actor,
        )
        sub = await subscriptions_repo.get(session, subscription_id)
        return outcome(200, SubscriptionOut.of(sub), etag=etag(sub.version))

    return await write.run(work, expected_version=expected)
