"""Request and response bodies (JSON in camelCase), and the problem document for the docs."""

from __future__ import annotations

import functools
import zoneinfo
from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic.functional_validators import AfterValidator

from billing_core.domain.coupons import Coupon
from billing_core.domain.invoice_lines import InvoiceLine
from billing_core.domain.money import BIGINT_MAX
from billing_core.domain.scopes import Scope
from billing_core.repo.api_clients import ApiKeyInfo
from billing_core.repo.customers import Customer
from billing_core.repo.gateway_customers import GatewayCustomer
from billing_core.repo.invoices import Invoice
from billing_core.repo.plans import Plan
from billing_core.repo.subscriptions import Subscription
from billing_core.usecases.upcoming import UpcomingInvoice

Id = Annotated[StrictInt, Field(ge=1, le=BIGINT_MAX)]
Version = Annotated[StrictInt, Field(ge=0, le=BIGINT_MAX)]
PlanCode = Annotated[str, Field(min_length=1, max_length=50, pattern=r"^[A-Za-z0-9_\-]+$")]
CouponCode = Annotated[
    str,
    Field(
        min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_\-]+$", description="A coupon's code."
    ),
]


@functools.cache
def _zones() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones() | {"UTC"})


def _check_zone(value: str) -> str:
    if value not in _zones():
        raise ValueError("not an IANA time zone name (e.g. Europe/Paris)")
    return value


TimeZone = Annotated[str, Field(min_length=1, max_length=64), AfterValidator(_check_zone)]


class _Camel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True)


class _Request(_Camel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, frozen=True, extra="forbid"
    )


class CreateSubscriptionRequest(_Request):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"customerId": 42, "planCode": "PRO_MONTHLY", "timeZone": "Europe/Paris"},
                {"customerId": 43, "planCode": "BASIC_YEARLY", "startAt": "2026-12-01T00:00:00Z"},
                {"customerId": 44, "planCode": "PRO_MONTHLY", "trialEnd": "2027-01-15T00:00:00Z"},
            ]
        }
    )

    customer_id: Id
    plan_code: PlanCode
    time_zone: TimeZone = "UTC"
    start_at: AwareDatetime | None = Field(
        default=None,
        description="Start of the first period (default: now). Not in the future, and its "
        "first period must not be over yet.",
    )
    trial_end: AwareDatetime | None = Field(
        default=None,
        description="End of a free trial (after now): the subscription is TRIALING until then, "
        "nothing is charged, and the billing anchor is this instant. Omitted: the plan's "
        "trialDays (if any); null: no trial.",
    )

    coupon_code: CouponCode | None = Field(
        default=None,
        description="A coupon to redeem from the first invoice (or the first paid period after "
        "a trial); 404 coupon-not-found, 409 coupon-not-redeemable.",
    )

    def trial_choice(self) -> datetime | Literal["plan"] | None:
        """The trial asked for: an end, none (an explicit null), or the plan's."""
        return self.trial_end if "trial_end" in self.model_fields_set else "plan"


class CancelRequest(_Request):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"atPeriodEnd": True}, {"atPeriodEnd": False, "expectedVersion": 3}]
        }
    )

    at_period_end: StrictBool = Field(
        description="true: cancel when the current period ends; false: cancel now."
    )
    expected_version: Version | None = Field(
        default=None, description="Refuse (409) unless the subscription is at this version."
    )


class ChangePlanRequest(_Request):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"planCode": "PRO_MONTHLY", "expectedVersion": 2},
                {"planCode": "BASIC_MONTHLY", "prorationBehavior": "none"},
                {"planCode": "BASIC_MONTHLY", "effective": "period_end"},
            ]
        }
    )

    plan_code: PlanCode
    proration_behavior: Literal["create_prorations", "always_invoice", "none"] = Field(
        default="create_prorations",
        description="create_prorations: the difference for the rest of the period is invoiced "
        "(upgrade) or credited (downgrade) now; always_invoice: the same, and a downgrade's "
        "credit is applied at once to the OPEN invoices whose collection has not started "
        "(what is left stays credit); none: nothing now, the new price applies from the next "
        "renewal.",
    )
    effective: Literal["now", "period_end"] = Field(
        default="now",
        description="now: the change applies at once (prorated per prorationBehavior); "
        "period_end: it is scheduled for the current period's end (scheduledChange on the "
        "subscription), nothing is prorated, and the renewer invoices the next period at the "
        "new plan. Scheduling the current plan drops a scheduled change.",
    )
    expected_version: Version | None = Field(
        default=None, description="Refuse (409) unless the subscription is at this version."
    )


StripeCustomerId = Annotated[
    str,
    Field(
        min_length=5,
        max_length=255,
        pattern=r"^cus_[A-Za-z0-9]+$",
        description="The Stripe customer (cus_...).",
    ),
]
StripePaymentMethodId = Annotated[
    str,
    Field(
        min_length=4,
        max_length=255,
        pattern=r"^(pm|card|src)_[A-Za-z0-9]+$",
        description="The customer's default Stripe payment method (pm_..., or an older card_ or "
        "src_): an id, never card data.",
    ),
]


class PaymentMethodRequest(_Request):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "gateway": "stripe",
                    "gatewayCustomerId": "cus_NffrFeUfNV2Hib",
                    "paymentMethodId": "pm_1MqLiJLkdIwHu7ixUEgbFdYF",
                }
            ]
        }
    )

    gateway: Literal["stripe"] = "stripe"
    gateway_customer_id: StripeCustomerId
    payment_method_id: StripePaymentMethodId


class PaymentMethodOut(_Camel):
    customer_id: int
    gateway: str
    gateway_customer_id: str
    payment_method_id: str
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, row: GatewayCustomer) -> PaymentMethodOut:
        return cls(
            customer_id=row.customer_id,
            gateway=row.gateway,
            gateway_customer_id=row.gateway_customer_id,
            payment_method_id=row.payment_method_id,
            created_at=row.created_at,
            updated_at=row.updated_at,
        )


class PlanOut(_Camel):
    code: str
    name: str
    price_amount: int = Field(description="Minor units of the currency (e.g. cents).")
    currency: str
    interval: Literal["MONTH", "YEAR"]

    @classmethod
    def of(cls, plan: Plan) -> PlanOut:
        return cls(
            code=plan.code,
            name=plan.name,
            price_amount=plan.price_amount,
            currency=plan.currency,
            interval=plan.billing_interval,
        )


class PlanList(_Camel):
    items: list[PlanOut]


class PauseOut(_Camel):
    """Collection paused: renewals of periods starting before resumesAt are created VOID or
    DRAFT, and no invoice of the subscription is collected."""

    behavior: Literal["void", "keep_as_draft"]
    paused_at: datetime
    resumes_at: datetime | None


class ScheduledChangeOut(_Camel):
    """A plan change scheduled for the period end: the renewer applies it then."""

    plan_code: str
    effective_at: datetime = Field(description="The current period's end.")


class SubscriptionOut(_Camel):
    id: int
    customer_id: int
    status: Literal["TRIALING", "ACTIVE", "PAST_DUE", "CANCELED"]
    plan: PlanOut
    time_zone: str
    billing_anchor: datetime
    period_index: int
    current_period_start: datetime
    current_period_end: datetime
    cancel_at_period_end: bool
    canceled_at: datetime | None
    credit_balance: int = Field(description="Credit (minor units) for the next invoices.")
    version: int = Field(description="Bumped by every change; send it back as If-Match.")
    created_at: datetime
    trial_end: datetime | None = Field(
        default=None,
        description="End of the free trial (null: none); while TRIALING the current period is "
        "the trial and ends then.",
    )
    pause: PauseOut | None = Field(
        default=None, description="Collection paused (null: collected as usual)."
    )
    scheduled_change: ScheduledChangeOut | None = Field(
        default=None, description="A plan change scheduled for the period end (null: none)."
    )

    @classmethod
    def of(cls, sub: Subscription) -> SubscriptionOut:
        return cls(
            id=sub.id,
            customer_id=sub.customer_id,
            status=sub.status,
            plan=PlanOut(
                code=sub.plan_code,
                name=sub.plan_name,
                price_amount=sub.plan_price_amount,
                currency=sub.plan_currency,
                interval=sub.plan_interval,
            ),
            time_zone=sub.time_zone,
            billing_anchor=sub.billing_anchor,
            period_index=sub.period_index,
            current_period_start=sub.current_period_start,
            current_period_end=sub.current_period_end,
            cancel_at_period_end=sub.cancel_at_period_end,
            canceled_at=sub.canceled_at,
            credit_balance=sub.credit_balance,
            version=sub.version,
            created_at=sub.created_at,
            trial_end=sub.trial_end,
            pause=None
            if sub.paused_at is None
            else PauseOut(
                behavior=sub.pause_behavior,
                paused_at=sub.paused_at,
                resumes_at=sub.pause_resumes_at,
            ),
            scheduled_change=None
            if sub.scheduled_plan_code is None
            else ScheduledChangeOut(
                plan_code=sub.scheduled_plan_code, effective_at=sub.current_period_end
            ),
        )


class PlanChangeOut(_Camel):
    changed: bool = Field(description="False when the subscription already had this plan.")
    due: int = Field(description="Prorated amount: > 0 invoiced, < 0 credited.")
    proration_invoice_id: int | None = Field(
        description="The PRORATION invoice created (null: none, or a preview)."
    )
    proration_amount: int = Field(
        default=0,
        description="What the PRORATION invoice charges once the credit balance paid its part "
        "(0 without one).",
    )
    credit_granted: int
    subscription: SubscriptionOut
    preview: bool = Field(
        default=False,
        description="true: nothing was written (?preview=true); this is what the change would do.",
    )
    scheduled: bool = Field(
        default=False,
        description="true: the change is scheduled for the period end (effective: period_end), "
        "not applied now.",
    )
    period_invoice_id: int | None = Field(
        default=None,
        description="A plan with another billing interval, now: the new period starts at the "
        "change and this is its RENEWAL invoice (null: none, or a preview).",
    )
    period_invoice_amount: int = Field(
        default=0,
        description="What that RENEWAL invoice charges once the credit balance (the unused "
        "part of the old period included) paid its part (0 without one).",
    )


class InvoiceLineOut(_Camel):
    kind: Literal[
        "PLAN_PERIOD", "PRORATION_CHARGE", "PRORATION_CREDIT", "DISCOUNT", "TAX", "CREDIT_APPLIED"
    ] = Field(
        description="Charges are positive; PRORATION_CREDIT, DISCOUNT and CREDIT_APPLIED "
        "are negative."
    )
    description: str
    quantity: int
    unit_amount: int = Field(description="Minor units of the invoice's currency.")
    amount: int = Field(description="quantity x unitAmount, minor units.")
    period_start: datetime | None
    period_end: datetime | None
    tax_inclusive: bool | None = Field(
        default=None,
        description="TAX lines only: true when the tax is inside the prices of the lines above "
        "(they are net of it), false when it was added on top; null on other lines.",
    )

    @classmethod
    def of(cls, line: InvoiceLine) -> InvoiceLineOut:
        return cls(
            kind=line.kind.value,
            description=line.description,
            quantity=line.quantity,
            unit_amount=line.unit_amount,
            amount=line.amount,
            period_start=line.period_start,
            period_end=line.period_end,
            tax_inclusive=line.tax_inclusive,
        )


class InvoiceOut(_Camel):
    id: int
    number: str | None = Field(
        default=None,
        description="The document number (e.g. 2026-000123), gap-free per year; null until the "
        "renewer's numbering pass has given it (within a poll interval).",
    )
    subscription_id: int
    kind: Literal["RENEWAL", "PRORATION"]
    period_index: int
    period_start: datetime
    period_end: datetime
    subtotal: int
    credit_applied: int
    amount: int
    currency: str
    status: Literal["DRAFT", "OPEN", "PAID", "FAILED", "VOID"] = Field(
        description="DRAFT: a period renewed while collection was paused with keep_as_draft "
        "(never collected)."
    )
    attempt_count: int
    next_attempt_at: datetime | None
    paid_at: datetime | None
    created_at: datetime
    void_requested_at: datetime | None = Field(
        default=None,
        description="Canceled while a gateway call for it was in flight: it stays OPEN until "
        "that call's result decides (VOID, or VOID with the money refunded).",
    )
    lines: list[InvoiceLineOut] = Field(
        default_factory=list,
        description="The invoice's line items: amount is their sum, creditApplied minus the sum "
        "of its CREDIT_APPLIED lines.",
    )

    @classmethod
    def of(cls, inv: Invoice, lines: Sequence[InvoiceLine] = ()) -> InvoiceOut:
        return cls(
            id=inv.id,
            number=inv.number,
            subscription_id=inv.subscription_id,
            kind=inv.kind,
            period_index=inv.period_index,
            period_start=inv.period_start,
            period_end=inv.period_end,
            subtotal=inv.subtotal,
            credit_applied=inv.credit_applied,
            amount=inv.amount,
            currency=inv.currency,
            status=inv.status,
            attempt_count=inv.attempt_count,
            next_attempt_at=inv.next_attempt_at,
            paid_at=inv.paid_at,
            created_at=inv.created_at,
            void_requested_at=inv.void_requested_at,
            lines=[InvoiceLineOut.of(line) for line in lines],
        )


class InvoicePage(_Camel):
    items: list[InvoiceOut]
    next_cursor: str | None = Field(
        description="Pass as ?cursor= for the next (older) page; null on the last page."
    )


class WebhookData(_Camel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, frozen=True, extra="ignore"
    )
    charge_id: str | None = Field(default=None, max_length=200)
    idempotency_key: str = Field(min_length=1, max_length=100)
    invoice_id: Id
    attempt: Annotated[StrictInt, Field(ge=0, le=1_000_000)]
    customer_id: Annotated[StrictInt, Field(ge=0, le=BIGINT_MAX)] | None = Field(
        default=None, description="Required on charge.succeeded."
    )
    amount: Annotated[StrictInt, Field(ge=0, le=BIGINT_MAX)] | None = Field(
        default=None, description="Minor units; required on charge.succeeded."
    )
    currency: str | None = Field(
        default=None, max_length=3, description="Required on charge.succeeded."
    )
    decline_code: str | None = Field(default=None, max_length=100)


SUCCEEDED = "charge.succeeded"


class WebhookEvent(_Camel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        frozen=True,
        extra="ignore",
        json_schema_extra={
            "examples": [
                {
                    "id": "evt_0001",
                    "type": "charge.succeeded",
                    "created": 1764547200,
                    "data": {
                        "chargeId": "ch_0001",
                        "idempotencyKey": "inv-7-try-0",
                        "invoiceId": 7,
                        "attempt": 0,
                        "customerId": 42,
                        "amount": 2990,
                        "currency": "EUR",
                    },
                }
            ]
        },
    )
    id: str = Field(min_length=1, max_length=100)
    type: str = Field(min_length=1, max_length=50)
    created: Annotated[StrictInt, Field(ge=0, le=BIGINT_MAX)]
    data: WebhookData

    @model_validator(mode="after")
    def _success_says_what_it_charged(self) -> WebhookEvent:
        data = self.data
        if self.type == SUCCEEDED:
            unsaid = [
                name
                for name, value in (
                    ("data.amount", data.amount),
                    ("data.currency", data.currency),
                    ("data.customerId", data.customer_id),
                )
                if value is None
            ]
            if unsaid:
                raise ValueError(f"{SUCCEEDED} requires {', '.join(unsaid)}")
        return self


class WebhookAck(_Camel):
    event_id: str
    result: str = Field(
        description="APPLIED, ALREADY_SETTLED, STALE_ATTEMPT, RECONCILIATION, MISMATCH (the "
        "event's amount, currency or customer is not the invoice's, its attempt was never sent, "
        "or a success is reported for an attempt that was declined: recorded, never applied), "
        "REFUND (money the invoice cannot keep — it is VOID or FAILED, or already PAID "
        "under another key: a refund is requested), NOT_FOUND, DUPLICATE (event seen before) or "
        "IGNORED (type not handled)."
    )


class FieldError(BaseModel):
    field: str
    message: str
    code: str | None = None


class Problem(BaseModel):
    """RFC 9457 problem details (media type application/problem+json)."""

    model_config = ConfigDict(extra="allow")

    type: str
    title: str
    status: int
    detail: str | None = None
    instance: str | None = None
    requestId: str | None = None
    errors: list[FieldError] | None = None
    currentVersion: int | None = None


class StripeEventBody(BaseModel):
    """What the OpenAPI document shows of a Stripe event: the envelope the receiver reads (the
    receiver itself parses the signed raw body, and acknowledges types it does not handle)."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "examples": [
                {
                    "id": "evt_3MtwBwLkdIwHu7ix0Zv0AbCd",
                    "object": "event",
                    "type": "payment_intent.succeeded",
                    "data": {
                        "object": {
                            "id": "pi_3MtwBwLkdIwHu7ix28a3tqPa",
                            "object": "payment_intent",
                            "amount": 990,
                            "currency": "eur",
                            "status": "succeeded",
                            "metadata": {"invoiceId": "42", "attempt": "0"},
                        }
                    },
                }
            ]
        },
    )

    id: str
    type: str
    data: dict[str, Any]


class Health(BaseModel):
    status: str


def inline_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON schema with its ``$defs`` inlined (for ``openapi_extra`` bodies)."""
    schema = model.model_json_schema(by_alias=True)
    defs = schema.pop("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return resolve(defs[ref.removeprefix("#/$defs/")])
            return {k: resolve(v) for k, v in node.items()}
        if isinstance(node, list):
            return [resolve(v) for v in node]
        return node

    result: dict[str, Any] = resolve(schema)
    return result


class ApiKeyOut(_Camel):
    id: int
    name: str
    prefix: str = Field(description="The first characters of the key: enough to name it.")
    scopes: list[Scope]
    status: Literal["active", "expired", "revoked"]
    created_at: datetime
    last_used_at: datetime | None = Field(
        description="The last look-up of the key (to within a minute plus the auth cache time)."
    )
    expires_at: datetime | None
    revoked_at: datetime | None
    rate_limit_per_minute: int | None
    rotated_from_id: int | None

    @classmethod
    def of(cls, info: ApiKeyInfo, now: datetime) -> ApiKeyOut:
        return cls(
            id=info.id,
            name=info.name,
            prefix=info.key_prefix,
            scopes=list(info.scopes),
            status=info.status_at(now),
            created_at=info.created_at,
            last_used_at=info.last_used_at,
            expires_at=info.expires_at,
            revoked_at=info.revoked_at,
            rate_limit_per_minute=info.rate_limit_per_minute,
            rotated_from_id=info.rotated_from_id,
        )


class ApiKeyList(_Camel):
    items: list[ApiKeyOut]


class NewApiKeyOut(_Camel):
    key: str = Field(description="The key itself: shown this once, only its hash is stored.")
    api_key: ApiKeyOut
    previous: ApiKeyOut | None = Field(
        default=None, description="Rotation: the old key, valid until its expiresAt."
    )


Seconds = Annotated[StrictInt, Field(ge=1, le=10 * 365 * 86_400)]


class CreateApiKeyRequest(_Request):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"name": "support-dashboard", "scopes": ["subscriptions:read", "invoices:read"]},
                {
                    "name": "shop-frontend",
                    "scopes": ["plans:read", "subscriptions:read", "subscriptions:write"],
                    "expiresInSeconds": 7776000,
                    "rateLimitPerMinute": 1200,
                },
            ]
        }
    )

    name: str = Field(
        min_length=1,
        max_length=200,
        pattern=r"^[^\x00-\x1f\x7f]*[^\s\x00-\x1f\x7f][^\x00-\x1f\x7f]*$",
        description="Who the key is for (printable text).",
    )
    scopes: list[Scope] = Field(min_length=1, max_length=len(Scope))
    expires_in_seconds: Seconds | None = None
    rate_limit_per_minute: Annotated[StrictInt, Field(ge=1, le=10_000_000)] | None = None


class RotateApiKeyRequest(_Request):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"graceSeconds": 86400},
                {"graceSeconds": 3600, "expiresInSeconds": 7776000},
            ]
        }
    )

    grace_seconds: Annotated[StrictInt, Field(ge=0, le=30 * 86_400)] = Field(
        default=86_400, description="How long the old key keeps working."
    )
    expires_in_seconds: Seconds | None = None


class HistoryEntry(_Camel):
    at: datetime
    kind: Literal["api", "invoice", "payment_attempt", "event"]
    what: str = Field(description="The action, invoice kind and status, attempt outcome or event.")
    client_id: int | None = Field(default=None, description="api: the client that made it.")
    request_id: str | None = None
    version_before: int | None = None
    version_after: int | None = None
    ref: str = Field(description="The audit row, invoice or attempt id, or the event id.")
    detail: dict[str, Any] = Field(default_factory=dict)


class SubscriptionHistory(_Camel):
    items: list[HistoryEntry]


Currency = Annotated[str, Field(pattern=r"^[A-Z]{3}$", description="ISO-4217 code, e.g. EUR.")]
# Text a person or another system wrote: no control characters (PostgreSQL refuses NUL), and
# for an id no surrounding white space either.
_VISIBLE = r"[^\s\x00-\x1f\x7f]"
_PRINTABLE = r"[^\x00-\x1f\x7f]"
ExternalId = Annotated[
    str,
    Field(
        min_length=1,
        max_length=255,
        pattern=rf"^{_VISIBLE}({_PRINTABLE}*{_VISIBLE})?$",
        description="Your own id for the customer; unique.",
    ),
]


class CreateCustomerRequest(_Request):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "externalId": "crm-0042",
                    "email": "ada@example.com",
                    "name": "Ada Lovelace",
                    "timeZone": "Europe/London",
                    "currency": "GBP",
                }
            ]
        }
    )

    external_id: ExternalId = Field(description="Unique: 409 customer-exists when taken.")
    email: str | None = Field(
        default=None,
        max_length=320,
        pattern=r"^[^@\s\x00-\x1f\x7f]+@[^@\s\x00-\x1f\x7f]+$",
        description="E-mail address.",
    )
    name: str | None = Field(
        default=None, min_length=1, max_length=200, pattern=rf"^{_PRINTABLE}+$"
    )
    time_zone: TimeZone = Field(
        default="UTC", description="Default time zone of the customer's subscriptions."
    )
    currency: Currency | None = Field(default=None, description="Default currency.")


class CustomerOut(_Camel):
    id: int
    external_id: str
    email: str | None
    name: str | None
    time_zone: str
    currency: str | None
    created_at: datetime

    @classmethod
    def of(cls, customer: Customer) -> CustomerOut:
        return cls(
            id=customer.id,
            external_id=customer.external_id,
            email=customer.email,
            name=customer.name,
            time_zone=customer.time_zone,
            currency=customer.currency,
            created_at=customer.created_at,
        )


class CustomerPage(_Camel):
    items: list[CustomerOut]
    next_cursor: str | None = Field(
        description="Pass as ?cursor= for the next (older) page; null on the last page."
    )


class SubscriptionPage(_Camel):
    items: list[SubscriptionOut]
    next_cursor: str | None = Field(
        description="Pass as ?cursor= for the next (older) page; null on the last page."
    )


class EndTrialRequest(_Request):
    model_config = ConfigDict(json_schema_extra={"examples": [{}, {"expectedVersion": 1}]})

    expected_version: Version | None = Field(
        default=None, description="Refuse (409) unless the subscription is at this version."
    )


class EndTrialOut(_Camel):
    invoice_id: int = Field(description="The first paid period's invoice (OPEN, due now).")
    subscription: SubscriptionOut


class ResumeRequest(_Request):
    model_config = ConfigDict(json_schema_extra={"examples": [{}, {"expectedVersion": 4}]})

    expected_version: Version | None = Field(
        default=None, description="Refuse (409) unless the subscription is at this version."
    )


class PauseRequest(_Request):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"behavior": "void"},
                {"behavior": "keep_as_draft", "resumesAt": "2027-03-01T00:00:00Z"},
            ]
        }
    )

    behavior: Literal["void", "keep_as_draft"] = Field(
        description="What the renewals of paused periods become: void (created VOID: those "
        "periods are free) or keep_as_draft (created DRAFT: kept, never collected)."
    )
    resumes_at: AwareDatetime | None = Field(
        default=None,
        description="When collection resumes by itself (after now); omitted or null: only "
        "POST /subscriptions/{id}/resume does.",
    )
    expected_version: Version | None = Field(
        default=None, description="Refuse (409) unless the subscription is at this version."
    )


class ResumeRenewalRequest(_Request):
    model_config = ConfigDict(json_schema_extra={"examples": [{}, {"expectedVersion": 2}]})

    expected_version: Version | None = Field(
        default=None, description="Refuse (409) unless the subscription is at this version."
    )


class UpcomingInvoiceOut(_Camel):
    subscription_id: int
    kind: Literal["RENEWAL"]
    period_index: int
    period_start: datetime = Field(description="When the renewer creates it (the period end).")
    period_end: datetime
    subtotal: int
    credit_applied: int = Field(description="Credit the balance will pay, as it is now.")
    amount: int = Field(description="What will be charged: subtotal - creditApplied.")
    currency: str
    status: Literal["OPEN", "PAID", "VOID", "DRAFT"] = Field(
        description="OPEN (to be charged), or PAID when credit covers all of it; VOID or DRAFT "
        "when its period starts while collection is paused (then it is not charged)."
    )
    tax: int = Field(
        default=0, description="The tax in subtotal (its TAX line), 0 without a tax location."
    )
    lines: list[InvoiceLineOut] = Field(
        default_factory=list, description="Its line items, as the renewer will write them."
    )

    @classmethod
    def of(cls, upcoming: UpcomingInvoice) -> UpcomingInvoiceOut:
        invoice = upcoming.invoice
        return cls(
            subscription_id=invoice.subscription_id,
            kind="RENEWAL",
            period_index=invoice.period_index,
            period_start=invoice.period_start,
            period_end=invoice.period_end,
            subtotal=invoice.subtotal,
            credit_applied=invoice.credit_applied,
            amount=invoice.amount,
            currency=invoice.currency,
            status=str(invoice.status),
            tax=invoice.tax,
            lines=[InvoiceLineOut.of(line) for line in upcoming.lines],
        )


class TaxLocationRequest(_Request):
    model_config = ConfigDict(json_schema_extra={"examples": [{"country": "US", "region": "NY"}]})

    country: Annotated[
        str, Field(pattern=r"^[A-Z]{2}$", description="ISO 3166-1 alpha-2, e.g. `FR`.")
    ]
    region: (
        Annotated[
            str,
            Field(
                pattern=r"^[A-Z0-9]{1,10}$",
                description="A region of the country with its own rate (e.g. the US state `NY`).",
            ),
        ]
        | None
    ) = None


class TaxLocationOut(_Camel):
    subscription_id: int
    country: str
    region: str | None
    tax_rate: str | None = Field(
        description="The rate its next invoices are taxed at (e.g. `VAT 20% (FR)`, inclusive or "
        "exclusive), or null: no rate for this location, no tax."
    )
    tax_inclusive: bool | None = Field(
        description="True: the prices include the tax; false: it is added on top; null: no tax."
    )


class CreateCouponRequest(_Request):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "code": "WELCOME25",
                    "percentOff": 25,
                    "duration": "REPEATING",
                    "durationInPeriods": 3,
                },
                {
                    "code": "TENOFF",
                    "amountOff": 1000,
                    "currency": "EUR",
                    "duration": "ONCE",
                    "maxRedemptions": 100,
                    "redeemBy": "2027-01-31T23:59:59Z",
                },
            ]
        }
    )

    code: CouponCode
    percent_off: Annotated[Decimal, Field(gt=0, le=100, decimal_places=2)] | None = Field(
        default=None, description="Percent off each discounted invoice (up to 2 decimals)."
    )
    amount_off: Annotated[StrictInt, Field(ge=1, le=BIGINT_MAX)] | None = Field(
        default=None, description="Minor units off each discounted invoice (at most its price)."
    )
    currency: Currency | None = Field(default=None, description="With amountOff only.")
    duration: Literal["ONCE", "REPEATING", "FOREVER"]
    duration_in_periods: Annotated[StrictInt, Field(ge=1, le=1200)] | None = Field(
        default=None, description="REPEATING only: how many periods it discounts."
    )
    max_redemptions: Annotated[StrictInt, Field(ge=1, le=2_000_000_000)] | None = None
    redeem_by: AwareDatetime | None = Field(
        default=None, description="Not redeemable from this instant on."
    )

    @model_validator(mode="after")
    def _one_kind(self) -> CreateCouponRequest:
        if (self.percent_off is None) == (self.amount_off is None):
            raise ValueError("give percentOff or amountOff (with currency), not both")
        if (self.amount_off is None) != (self.currency is None):
            raise ValueError("currency goes with amountOff, and only with it")
        if (self.duration == "REPEATING") != (self.duration_in_periods is not None):
            raise ValueError("durationInPeriods goes with a REPEATING duration, and only with it")
        return self

    def percent_off_bp(self) -> int | None:
        return None if self.percent_off is None else int(self.percent_off * 100)


class CouponOut(_Camel):
    code: str
    percent_off: float | None = Field(description="Percent off, or null (an amount off).")
    amount_off: int | None
    currency: str | None
    duration: Literal["ONCE", "REPEATING", "FOREVER"]
    duration_in_periods: int | None
    max_redemptions: int | None
    redeem_by: datetime | None
    times_redeemed: int

    @classmethod
    def of(cls, coupon: Coupon) -> CouponOut:
        return cls(
            code=coupon.code,
            percent_off=None if coupon.percent_off_bp is None else coupon.percent_off_bp / 100,
            amount_off=coupon.amount_off,
            currency=coupon.currency,
            duration=coupon.duration.value,
            duration_in_periods=coupon.duration_periods,
            max_redemptions=coupon.max_redemptions,
            redeem_by=coupon.redeem_by,
            times_redeemed=coupon.times_redeemed,
        )


class ApplyCouponRequest(_Request):
    model_config = ConfigDict(json_schema_extra={"examples": [{"couponCode": "WELCOME25"}]})

    coupon_code: CouponCode


class DiscountOut(_Camel):
    subscription_id: int
    coupon: CouponOut
    from_period: int = Field(description="The first period index it discounts.")
    until_period: int | None = Field(
        description="The first period index it no longer discounts (null: for ever)."
    )
