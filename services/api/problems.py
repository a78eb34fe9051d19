"""Every error answer of the API is ``application/problem+json`` (RFC 9457), built here and only
here; :func:`install` registers its handlers with the console's HTML error pages.

Each problem has a stable ``type`` URI (``urn:problem-type:billing:<slug>``), a short ``title``,
the HTTP ``status``, a ``detail`` for humans, the ``instance`` (request path) and the
``requestId`` that also appears in the logs. Domain errors (``billing_core.domain.errors`` and
the use cases' errors, all ``DomainError``) are mapped to HTTP in :data:`DOMAIN_ERRORS`, the
one table that knows about status codes.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from billing_core import stripe_gateway
from billing_core.domain import coupons as coupon_rules
from billing_core.domain import errors as domain_errors
from billing_core.domain import scopes
from billing_core.logging import get_logger
from billing_core.repo import api_clients as api_clients_repo
from billing_core.repo import coupons as coupons_repo
from billing_core.repo import customers as customers_repo
from billing_core.repo import invoices as invoices_repo
from billing_core.repo import plans as plans_repo
from billing_core.repo import subscriptions as subscriptions_repo
from billing_core.usecases import change_plan as change_plan_uc
from billing_core.usecases import subscribe as subscribe_uc
from billing_core.usecases import upcoming as upcoming_uc

PROBLEM_JSON = "application/problem+json"
TYPE_PREFIX = "urn:problem-type:billing:"

log = get_logger(__name__)


@dataclass(frozen=True)
class ProblemKind:
    status: int
    slug: str
    title: str

    @property
    def type(self) -> str:
        return TYPE_PREFIX + self.slug


MALFORMED_JSON = ProblemKind(400, "malformed-json", "Malformed JSON body")
BAD_REQUEST = ProblemKind(400, "bad-request", "Bad request")
IDEMPOTENCY_KEY_REQUIRED = ProblemKind(
    400, "idempotency-key-required", "Idempotency-Key header required"
)
IDEMPOTENCY_KEY_INVALID = ProblemKind(400, "idempotency-key-invalid", "Invalid Idempotency-Key")
UNAUTHORIZED = ProblemKind(401, "unauthorized", "Missing or invalid API key")
FORBIDDEN = ProblemKind(403, "forbidden", "The API key lacks the scope this needs")
WEBHOOK_SIGNATURE = ProblemKind(401, "invalid-signature", "Invalid webhook signature")
NOT_FOUND = ProblemKind(404, "not-found", "Resource not found")
METHOD_NOT_ALLOWED = ProblemKind(405, "method-not-allowed", "Method not allowed")
NOT_ACCEPTABLE = ProblemKind(406, "not-acceptable", "Not acceptable")
VERSION_CONFLICT = ProblemKind(409, "version-conflict", "The subscription changed meanwhile")
STATE_CONFLICT = ProblemKind(409, "state-conflict", "Not allowed in the current state")
IDEMPOTENCY_IN_FLIGHT = ProblemKind(
    409, "idempotency-request-in-progress", "A request with this Idempotency-Key is in progress"
)
PAYLOAD_TOO_LARGE = ProblemKind(413, "payload-too-large", "Request body too large")
UNSUPPORTED_MEDIA_TYPE = ProblemKind(415, "unsupported-media-type", "Unsupported media type")
VALIDATION = ProblemKind(422, "validation-error", "Request validation failed")
IDEMPOTENCY_MISMATCH = ProblemKind(
    422, "idempotency-key-reused", "Idempotency-Key reused with a different request"
)
UNKNOWN_PLAN = ProblemKind(422, "unknown-plan", "Unknown plan")
UNKNOWN_CUSTOMER = ProblemKind(422, "unknown-customer", "Unknown customer")
PLAN_CHANGE_NOT_ALLOWED = ProblemKind(422, "plan-change-not-allowed", "Plan change not allowed")
BUSINESS_RULE = ProblemKind(422, "business-rule-violated", "Business rule violated")
SUBSCRIPTION_NOT_FOUND = ProblemKind(404, "subscription-not-found", "Subscription not found")
API_KEY_NOT_FOUND = ProblemKind(404, "api-key-not-found", "API key not found")
CUSTOMER_NOT_FOUND = ProblemKind(404, "customer-not-found", "Customer not found")
INVOICE_NOT_FOUND = ProblemKind(404, "invoice-not-found", "Invoice not found")
NO_UPCOMING_INVOICE = ProblemKind(404, "no-upcoming-invoice", "No upcoming invoice")
CUSTOMER_EXISTS = ProblemKind(409, "customer-exists", "A customer has this externalId")
COUPON_NOT_FOUND = ProblemKind(404, "coupon-not-found", "Coupon not found")
COUPON_EXISTS = ProblemKind(409, "coupon-exists", "A coupon has this code")
COUPON_NOT_REDEEMABLE = ProblemKind(409, "coupon-not-redeemable", "Coupon not redeemable")
DISCOUNT_EXISTS = ProblemKind(409, "discount-exists", "The subscription has a coupon already")
PAYMENT_METHOD_NOT_OURS = ProblemKind(
    422, "payment-method-not-ours", "The payment method is not this customer's"
)
GATEWAY_UNAVAILABLE = ProblemKind(503, "gateway-unavailable", "The payment gateway did not answer")
INTERNAL = ProblemKind(500, "internal-error", "Internal error")
UNAVAILABLE = ProblemKind(503, "service-unavailable", "Service unavailable")

_BY_STATUS = {
    400: BAD_REQUEST,
    401: UNAUTHORIZED,
    403: FORBIDDEN,
    404: NOT_FOUND,
    405: METHOD_NOT_ALLOWED,
    406: NOT_ACCEPTABLE,
    413: PAYLOAD_TOO_LARGE,
    415: UNSUPPORTED_MEDIA_TYPE,
    422: VALIDATION,
}

# The one place where domain errors become HTTP. Order matters: the first matching class wins,
# so subclasses come before their bases; DomainError itself is the catch-all.
DOMAIN_ERRORS: tuple[tuple[type[Exception], ProblemKind], ...] = (
    (subscriptions_repo.SubscriptionNotFound, SUBSCRIPTION_NOT_FOUND),
    (subscriptions_repo.UnknownCustomer, UNKNOWN_CUSTOMER),
    (api_clients_repo.ApiKeyNotFound, API_KEY_NOT_FOUND),
    (api_clients_repo.ApiKeyAmbiguous, BUSINESS_RULE),
    (api_clients_repo.ApiKeyInactive, STATE_CONFLICT),
    (scopes.UnknownScope, BUSINESS_RULE),
    (scopes.ScopeNotHeld, FORBIDDEN),
    (customers_repo.CustomerNotFound, CUSTOMER_NOT_FOUND),
    (customers_repo.CustomerExists, CUSTOMER_EXISTS),
    (coupons_repo.CouponNotFound, COUPON_NOT_FOUND),
    (coupons_repo.CouponExists, COUPON_EXISTS),
    (coupons_repo.DiscountExists, DISCOUNT_EXISTS),
    (coupons_repo.SubscriptionCanceledForCoupon, STATE_CONFLICT),
    (coupon_rules.CouponNotRedeemable, COUPON_NOT_REDEEMABLE),
    (coupon_rules.InvalidCoupon, VALIDATION),
    (invoices_repo.InvoiceNotFound, INVOICE_NOT_FOUND),
    (upcoming_uc.NoUpcomingInvoice, NO_UPCOMING_INVOICE),
    (subscriptions_repo.VersionConflict, VERSION_CONFLICT),
    (plans_repo.PlanNotFound, UNKNOWN_PLAN),
    (change_plan_uc.IncompatiblePlanChange, PLAN_CHANGE_NOT_ALLOWED),
    (subscribe_uc.InvalidStart, BUSINESS_RULE),
    (subscribe_uc.InvalidTrialEnd, BUSINESS_RULE),
    (stripe_gateway.PaymentMethodNotOurs, PAYMENT_METHOD_NOT_OURS),
    (stripe_gateway.GatewayUnavailable, GATEWAY_UNAVAILABLE),
    (domain_errors.IllegalTransition, STATE_CONFLICT),
    (domain_errors.ChangeOutsidePeriod, STATE_CONFLICT),
    (domain_errors.UnknownTimeZone, BUSINESS_RULE),
    (domain_errors.DomainError, BUSINESS_RULE),
)


class ApiProblem(Exception):
    """Raised by the API layer itself (auth, idempotency, signatures, limits)."""

    def __init__(
        self,
        kind: ProblemKind,
        detail: str | None = None,
        *,
        headers: Mapping[str, str] | None = None,
        **extensions: Any,
    ) -> None:
        super().__init__(detail or kind.title)
        self.kind = kind
        self.detail = detail
        self.headers = dict(headers or {})
        self.extensions = extensions


def problem_body(
    kind: ProblemKind,
    detail: str | None,
    *,
    instance: str | None,
    request_id: str | None,
    extensions: Mapping[str, Any] | None = None,
) -> bytes:
    body: dict[str, Any] = {"type": kind.type, "title": kind.title, "status": kind.status}
    if detail:
        body["detail"] = detail
    if instance:
        body["instance"] = instance
    if request_id:
        body["requestId"] = request_id
    body.update(extensions or {})
    return json.dumps(body, separators=(",", ":"), default=str).encode()


def problem_response(
    kind: ProblemKind,
    detail: str | None = None,
    *,
    instance: str | None = None,
    request_id: str | None = None,
    headers: Mapping[str, str] | None = None,
    extensions: Mapping[str, Any] | None = None,
) -> Response:
    return Response(
        problem_body(kind, detail, instance=instance, request_id=request_id, extensions=extensions),
        status_code=kind.status,
        media_type=PROBLEM_JSON,
        headers=dict(headers or {}),
    )


REQUEST_ID_SCOPE_KEY = "billing.request_id"


def _request_id(request: Request) -> str | None:
    value = request.scope.get(REQUEST_ID_SCOPE_KEY)
    return value if isinstance(value, str) else None


def _for_request(request: Request, kind: ProblemKind, detail: str | None, **kw: Any) -> Response:
    return problem_response(
        kind, detail, instance=request.url.path, request_id=_request_id(request), **kw
    )


def kind_for_domain_error(exc: Exception) -> ProblemKind:
    for cls, kind in DOMAIN_ERRORS:
        if isinstance(exc, cls):
            return kind
    return BUSINESS_RULE


def _field(loc: tuple[Any, ...] | list[Any]) -> str:
    return ".".join(str(part) for part in loc)


async def _on_validation(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    errors = exc.errors()
    if any(e.get("type") == "json_invalid" for e in errors):
        return _for_request(request, MALFORMED_JSON, "The request body is not valid JSON.")
    fields = [
        {"field": _field(e.get("loc", ())), "message": str(e.get("msg", "")), "code": e.get("type")}
        for e in errors
    ]
    return _for_request(
        request,
        VALIDATION,
        "; ".join(f"{f['field']}: {f['message']}" for f in fields)[:500],
        extensions={"errors": fields},
    )


async def _on_http(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    kind = _BY_STATUS.get(exc.status_code) or ProblemKind(
        exc.status_code, f"http-{exc.status_code}", "HTTP error"
    )
    detail = exc.detail if isinstance(exc.detail, str) else None
    return _for_request(request, kind, detail, headers=exc.headers)


async def _on_api_problem(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiProblem)
    return _for_request(
        request, exc.kind, exc.detail, headers=exc.headers, extensions=exc.extensions
    )


async def _on_domain_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, domain_errors.DomainError)
    kind = kind_for_domain_error(exc)
    extensions: dict[str, Any] = {}
    if isinstance(exc, subscriptions_repo.VersionConflict):
        extensions["currentVersion"] = exc.current_version
    if isinstance(exc, customers_repo.CustomerExists):
        extensions["customerId"] = exc.customer_id
    log.info("domain_error", error=type(exc).__name__, status=kind.status, detail=str(exc))
    return _for_request(request, kind, str(exc) or None, extensions=extensions)


ErrorHandler = Callable[[Request, Exception], Awaitable[Response]]
_HANDLERS: Mapping[type[Exception], ErrorHandler] = {
    RequestValidationError: _on_validation,
    StarletteHTTPException: _on_http,
    ApiProblem: _on_api_problem,
    domain_errors.DomainError: _on_domain_error,
}


def install(app: FastAPI, pages: Mapping[type[Exception], ErrorHandler] | None = None) -> None:
    """Every error answer of ``app``, in its one registry of handlers: the API's problems and
    ``pages``, the HTML error pages of the console (``console.web.ERROR_PAGES``)."""
    for error, handler in {**_HANDLERS, **(pages or {})}.items():
        app.add_exception_handler(error, handler)
