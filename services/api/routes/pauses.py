"""Pause and resume collection: ``POST /subscriptions/{id}/pause`` and ``/resume``."""

from __future__ import annotations

from functools import partial

from fastapi import APIRouter
from starlette.responses import Response

from billing_core.domain.subscription import PauseBehavior
from billing_core.usecases import pause as pause_uc
from services.api.routes.common import problems
from services.api.routes.subscription_change import SubscriptionChange
from services.api.schemas import PauseRequest, ResumeRequest, SubscriptionOut

router = APIRouter(tags=["subscriptions"])


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
async def pause_subscription(body: PauseRequest, change: SubscriptionChange) -> Response:
    pause = partial(
        pause_uc.pause, behavior=PauseBehavior(body.behavior), resumes_at=body.resumes_at
    )
    return await change.run(pause, body.expected_version)


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
async def resume_subscription(body: ResumeRequest, change: SubscriptionChange) -> Response:
    return await change.run(pause_uc.resume, body.expected_version)
