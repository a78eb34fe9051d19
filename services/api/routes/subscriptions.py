"""Subscriptions: create, read, cancel, change plan, list invoices, history."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from datetime import datetime
from functools import partial
from typing import Annotated

from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from billing_core.db.pg import Connection
from billing_core.domain import coupons as coupon_rules
from billing_core.domain.money import BIGINT_MAX
from billing_core.domain.scopes import Scope
from billing_core.repo import coupons as coupons_repo
from billing_core.repo import history as history_repo
from billing_core.repo import invoice_lines as invoice_lines_repo
from billing_core.repo import invoices as invoices_repo
from billing_core.repo import subscription_groups
from billing_core.repo import subscriptions as subscriptions_repo
from billing_core.repo.api_clients import ApiClient
from billing_core.repo.plans import Plan
from billing_core.repo.subscriptions import Claimed
from billing_core.usecases import cancel as cancel_uc
from billing_core.usecases import change_plan as change_plan_uc
from billing_core.usecases import subscribe as subscribe_uc
from services.api.auth import requires
from services.api.context import get_context
from services.api.idempotency import Outcome, Record, SubscriptionsWrite, rolled_back
from services.api.problems import ApiProblem, ProblemKind
from services.api.routes.common import etag, expected_version, json_response, outcome, problems
from services.api.routes.subscription_change import IfMatch, SubscriptionChange, SubscriptionId
from services.api.schemas import (
    CancelRequest,
    ChangePlanRequest,
    CreateSubscriptionRequest,
    HistoryEntry,
    InvoiceOut,
    InvoicePage,
    PlanChangeOut,
    SubscriptionHistory,
    SubscriptionOut,
)

router = APIRouter(tags=["subscriptions"])

INVALID_CURSOR = ProblemKind(400, "invalid-cursor", "Invalid cursor")
Writes = SubscriptionsWrite
Reader = Annotated[ApiClient, requires(Scope.SUBSCRIPTIONS_READ)]


@router.post(
    "/subscriptions",
    status_code=201,
    response_model=SubscriptionOut,
    summary="Subscribe a customer to a plan",
    description="Creates an ACTIVE subscription whose first period starts now (or at startAt) "
    "and its first invoice, due at once; or, with a trial (trialEnd, or the plan's trialDays), "
    "a TRIALING one and no invoice. The customer must exist (POST /customers): an unknown "
    "customerId is 422 unknown-customer. Requires an Idempotency-Key header.",
    responses=problems(400, 401, 403, 409, 413, 422, 429, 503),
)
async def create_subscription(
    request: Request, body: CreateSubscriptionRequest, write: Writes
) -> Response:
    ctx = get_context(request)

    def build(
        plan: Plan,
        now: datetime,
        ids: Sequence[int],
        discount: coupon_rules.Discount | None = None,
    ) -> tuple[subscribe_uc.NewSubscription, Outcome]:
        subscription_id, invoice_id = ids
        new = subscribe_uc.new_subscription(
            plan,
            subscription_id=subscription_id,
            invoice_id=invoice_id,
            customer_id=body.customer_id,
            time_zone=body.time_zone,
            start_at=body.start_at,
            trial_end=body.trial_choice(),
            now=now,
            discount=discount,
        )
        created = outcome(
            201,
            SubscriptionOut.of(new.subscription),
            etag=etag(new.subscription.version),
            location=f"/subscriptions/{subscription_id}",
        )
        return new, created

    async def write_new(now: datetime, record: Record) -> tuple[Claimed, Outcome]:
        # Plans and ids are cached: a connection is taken only to refresh them.
        plan = await ctx.plans.get_pooled(ctx.pg, body.plan_code)
        new, created = build(plan, now, await ctx.subscription_ids.take_pooled(ctx.pg))
        keyed = subscribe_uc.keyed(new, now=now, actor=write.actor, record=record(created))
        return await ctx.creates.submit(keyed), created

    async def write_with_coupon(now: datetime, record: Record) -> tuple[Claimed, Outcome]:
        # The redemption is counted, and the discount written, in the create statement's
        # transaction: a refused or replayed request counts no redemption.
        assert body.coupon_code is not None
        async with ctx.pg.acquire() as conn:
            transaction = conn.transaction()
            await transaction.start()
            try:
                plan = await ctx.plans.get(conn, body.plan_code)
                coupon = await coupons_repo.redeem(
                    conn, body.coupon_code, currency=plan.currency, now=now
                )
                discount = coupon_rules.redeem(coupon, starting_period=0)
                new, created = build(plan, now, await ctx.subscription_ids.take(conn), discount)
                keyed = subscribe_uc.keyed(new, now=now, actor=write.actor, record=record(created))
                (claimed,) = await subscription_groups.insert_unless_claimed(conn, [keyed])
                if claimed.created:
                    await coupons_repo.set_discount(conn, new.subscription.id, discount, now=now)
            except BaseException:
                await transaction.rollback()
                raise
            await (transaction.commit() if claimed.created else transaction.rollback())
        return claimed, created

    return await write.create(write_with_coupon if body.coupon_code is not None else write_new)


@router.get(
    "/subscriptions/{id}",
    response_model=SubscriptionOut,
    summary="Read a subscription",
    responses=problems(401, 403, 404, 422, 429),
)
async def get_subscription(
    request: Request, subscription_id: SubscriptionId, _client: Reader
) -> Response:
    async with get_context(request).pg.acquire() as conn:
        sub = await subscriptions_repo.get(conn, subscription_id)
    return json_response(SubscriptionOut.of(sub), ETag=etag(sub.version))


@router.post(
    "/subscriptions/{id}/cancel",
    response_model=SubscriptionOut,
    summary="Cancel now or at the end of the current period",
    description="Immediately: the subscription becomes CANCELED and its OPEN invoices VOID. "
    "atPeriodEnd: it stays active until the period ends. Cancelling a canceled subscription "
    "succeeds without change.",
    responses=problems(400, 401, 403, 404, 409, 413, 422, 429, 503),
)
async def cancel_subscription(body: CancelRequest, change: SubscriptionChange) -> Response:
    cancel = partial(cancel_uc.cancel, at_period_end=body.at_period_end)
    return await change.run(cancel, body.expected_version)


@router.post(
    "/subscriptions/{id}/change-plan",
    response_model=PlanChangeOut,
    summary="Change plan, prorated on the time left in the current period",
    description="An upgrade creates a PRORATION invoice for the prorated difference (credit "
    "applied first); a downgrade adds credit for later invoices. The same plan is a no-op; "
    "a plan in another currency is refused (422). A plan with another billing interval starts "
    "a new period now: the anchor moves to the change, the unused part of the current period "
    "is credited and the new period is invoiced in full (periodInvoiceId). ?preview=true runs "
    "the same change and rolls it back: the answer is what the change would do, nothing is "
    "written. effective=period_end schedules the change for the period end instead (nothing "
    "prorated; DELETE /subscriptions/{id}/scheduled-change drops it).",
    responses=problems(400, 401, 403, 404, 409, 413, 422, 429, 503),
)
async def change_plan(
    request: Request,
    subscription_id: SubscriptionId,
    body: ChangePlanRequest,
    write: Writes,
    if_match: IfMatch = None,
    preview: Annotated[
        bool,
        Query(
            description="true: answer what the change would do, by running it and rolling it "
            "back (nothing is written or stored under an Idempotency-Key)."
        ),
    ] = False,
) -> Response:
    expected = expected_version(if_match, body.expected_version)

    async def work(conn: Connection, now: datetime) -> Outcome:
        change = await change_plan_uc.change_plan(
            conn,
            subscription_id=subscription_id,
            plan_code=body.plan_code,
            expected_version=expected,
            now=now,
            actor=write.actor,
            proration_behavior=body.proration_behavior,
            effective=body.effective,
        )
        sub = await subscriptions_repo.get(conn, subscription_id)
        return outcome(
            200,
            PlanChangeOut(
                changed=change.changed,
                due=change.due,
                proration_invoice_id=None if preview else change.invoice_id,
                proration_amount=change.invoice_amount,
                credit_granted=change.credit_granted,
                subscription=SubscriptionOut.of(sub),
                preview=preview,
                scheduled=change.scheduled,
                period_invoice_id=None if preview else change.period_invoice_id,
                period_invoice_amount=change.period_invoice_amount,
            ),
            etag=etag(sub.version),
        )

    if preview:
        return await rolled_back(get_context(request), work)
    return await write.run(work, expected_version=expected)


def _encode_cursor(invoice_id: int) -> str:
    return base64.urlsafe_b64encode(f"inv:{invoice_id}".encode()).decode().rstrip("=")


def _decode_cursor(cursor: str) -> int:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        prefix, _, value = raw.partition(":")
        invoice_id = int(value)
    except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
        raise ApiProblem(INVALID_CURSOR, "Use the nextCursor of a previous page.") from exc
    if prefix != "inv" or not 1 <= invoice_id <= BIGINT_MAX:
        raise ApiProblem(INVALID_CURSOR, "Use the nextCursor of a previous page.")
    return invoice_id


@router.get(
    "/subscriptions/{id}/invoices",
    response_model=InvoicePage,
    summary="List a subscription's invoices, newest first",
    description="Paginate with the opaque nextCursor (stable while invoices are added), or "
    "with limit/offset.",
    responses=problems(400, 401, 403, 404, 422, 429),
)
async def list_invoices(
    request: Request,
    subscription_id: SubscriptionId,
    _client: Annotated[ApiClient, requires(Scope.INVOICES_READ)],
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    offset: Annotated[int, Query(ge=0, le=100_000)] = 0,
    cursor: Annotated[str | None, Query(max_length=64)] = None,
) -> Response:
    before_id = _decode_cursor(cursor) if cursor is not None else None
    async with get_context(request).pg.acquire() as conn:
        if not await subscriptions_repo.exists(conn, subscription_id):
            raise subscriptions_repo.SubscriptionNotFound(subscription_id)
        rows = await invoices_repo.list_for_subscription(
            conn, subscription_id, limit=limit + 1, before_id=before_id, offset=offset
        )
        page = rows[:limit]
        lines = await invoice_lines_repo.lines_of(conn, [i.id for i in page])
    next_cursor = _encode_cursor(page[-1].id) if len(rows) > limit else None
    return json_response(
        InvoicePage(
            items=[InvoiceOut.of(i, lines.get(i.id, ())) for i in page], next_cursor=next_cursor
        )
    )


@router.get(
    "/subscriptions/{id}/history",
    response_model=SubscriptionHistory,
    summary="A subscription's timeline, oldest first",
    description="Every change made through the API (who, what, versions, request id), the "
    "invoices, the payment attempts and the events, in time order: the first place to look "
    "when a customer asks what happened.",
    responses=problems(401, 403, 404, 422, 429),
)
async def subscription_history(
    request: Request,
    subscription_id: SubscriptionId,
    _client: Reader,
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
) -> Response:
    async with get_context(request).pg.acquire() as conn:
        if not await subscriptions_repo.exists(conn, subscription_id):
            raise subscriptions_repo.SubscriptionNotFound(subscription_id)
        rows = await history_repo.for_subscription(conn, subscription_id, limit=limit)
    return json_response(
        SubscriptionHistory(items=[HistoryEntry.model_validate(vars(row)) for row in rows])
    )
