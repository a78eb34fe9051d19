"""Coupons: create and read them (``/coupons``), redeem one for a subscription
(``POST /subscriptions/{id}/coupon``; at subscribing: ``couponCode`` on ``POST /subscriptions``).
The rules are in :mod:`billing_core.domain.coupons`."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Path, Request
from starlette.responses import Response

from billing_core.db.pg import Connection
from billing_core.domain import coupons as coupon_rules
from billing_core.domain.scopes import Scope
from billing_core.repo import audit
from billing_core.repo import coupons as coupons_repo
from billing_core.repo.api_clients import ApiClient
from billing_core.usecases import coupons as coupons_uc
from services.api.auth import requires
from services.api.context import get_context
from services.api.idempotency import (
    IdempotentWrite,
    Outcome,
    SubscriptionsWrite,
    idempotent_write,
)
from services.api.routes.common import json_response, outcome, problems
from services.api.routes.subscription_change import SubscriptionId
from services.api.schemas import (
    ApplyCouponRequest,
    CouponCode,
    CouponOut,
    CreateCouponRequest,
    DiscountOut,
)

router = APIRouter(tags=["coupons"])

AdminWrite = Annotated[IdempotentWrite, idempotent_write(Scope.ADMIN)]
CodePath = Annotated[CouponCode, Path(alias="code")]


@router.post(
    "/coupons",
    status_code=201,
    response_model=CouponOut,
    summary="Create a coupon",
    description="A percentage or an amount off (in one currency), for ONCE, REPEATING "
    "(durationInPeriods) or FOREVER, with an optional maximum number of redemptions and "
    "expiry. A taken code is 409 coupon-exists. Accepts an Idempotency-Key header.",
    responses=problems(400, 401, 403, 409, 413, 422, 429, 503),
)
async def create_coupon(body: CreateCouponRequest, write: AdminWrite) -> Response:
    terms = coupon_rules.Coupon(
        code=body.code,
        duration=coupon_rules.Duration(body.duration),
        percent_off_bp=body.percent_off_bp(),
        amount_off=body.amount_off,
        currency=body.currency,
        duration_periods=body.duration_in_periods,
        max_redemptions=body.max_redemptions,
        redeem_by=body.redeem_by,
    )

    async def work(conn: Connection, now: datetime) -> Outcome:
        coupon_id, coupon = await coupons_repo.create(conn, terms, now=now)
        await audit.record(
            conn,
            audit.AuditEntry(
                write.actor,
                audit.COUPON_CREATE,
                audit.COUPON,
                coupon_id,
                detail={"code": coupon.code, "label": coupon.label},
            ),
            now=now,
        )
        return outcome(201, CouponOut.of(coupon), location=f"/coupons/{coupon.code}")

    return await write.run(work)


@router.get(
    "/coupons/{code}",
    response_model=CouponOut,
    summary="Read a coupon",
    description="Its terms and how many times it was redeemed; 404 coupon-not-found.",
    responses=problems(401, 403, 404, 422, 429),
)
async def get_coupon(
    request: Request,
    code: CodePath,
    _client: Annotated[ApiClient, requires(Scope.PLANS_READ)],
) -> Response:
    async with get_context(request).pg.acquire() as conn:
        coupon = await coupons_repo.get(conn, code)
    return json_response(CouponOut.of(coupon))


@router.post(
    "/subscriptions/{id}/coupon",
    response_model=DiscountOut,
    summary="Redeem a coupon for a subscription",
    description="The coupon discounts the subscription's invoices from the next one it will "
    "be invoiced for (a trial's first paid period; else the next period — the current one is "
    "invoiced already), for the coupon's duration; plan changes are prorated at the discounted "
    "prices meanwhile. One coupon per subscription (409 discount-exists); 404 "
    "coupon-not-found; 409 coupon-not-redeemable (expired, used up, another currency); 409 "
    "state-conflict when canceled.",
    responses=problems(400, 401, 403, 404, 409, 413, 422, 429, 503),
)
async def apply_coupon(
    subscription_id: SubscriptionId, body: ApplyCouponRequest, write: SubscriptionsWrite
) -> Response:
    async def work(conn: Connection, now: datetime) -> Outcome:
        # A redemption never goes back in time: at the request's instant or the row's last
        # write, whichever is later (subscription.change_instant).
        redeemed = await coupons_uc.apply_coupon(
            conn,
            subscription_id=subscription_id,
            code=body.coupon_code,
            now=now,
            actor=write.actor,
        )
        return outcome(
            200,
            DiscountOut(
                subscription_id=subscription_id,
                coupon=CouponOut.of(redeemed.coupon),
                from_period=redeemed.discount.from_period,
                until_period=redeemed.discount.until_period,
            ),
        )

    return await write.run(work)
