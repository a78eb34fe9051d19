"""The Stripe adapter of the gateway port (``BILLING_GATEWAY=stripe``).

* A charge is a PaymentIntent created with ``confirm=true, off_session=true``, the customer's
  Stripe customer id and default payment method (``gateway_customer``), the amount in Stripe's
  unit for the currency (:mod:`billing_core.domain.stripe_amounts`; an amount Stripe cannot
  charge exactly is not sent, and held for a person), metadata naming the invoice, attempt,
  subscription, customer and key, and the attempt's idempotency key as ``Idempotency-Key``.
* A refund is a Refund of the PaymentIntent, under the refund's own key.
* A look-up by key reads the PaymentIntent by its id when the caller knows it, else searches
  PaymentIntents by ``metadata['idempotency_key']`` (a search that may lag: ``SEARCH_LAG``).
* A payment method set for one of our customers is checked first (``StripePaymentMethods``).

Answers are mapped by :mod:`billing_core.domain.stripe_answers` onto the same result fields as
the simulator's (outcome, decline code, HTTP status, error), so the collector's rules — 429
pause, credentials pause, UNKNOWN retry with the same key, refusals held for a person — apply
unchanged. The SDK's own retries are off: the collector retries, always under the same key.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
import stripe

from billing_core.domain import stripe_amounts, stripe_answers
from billing_core.domain.charge_result import ChargeOutcome
from billing_core.domain.errors import DomainError
from billing_core.domain.refund import RefundOutcome
from billing_core.gateway import (
    ChargeResult,
    LookupResult,
    NotSent,
    OneCallGateway,
    RefundResult,
    retry_after_seconds,
)
from billing_core.logging import get_logger

log = get_logger(__name__)

# Our decline code when a customer has no Stripe customer and payment method on file: nothing
# is sent to Stripe, and the invoice follows the dunning schedule like any declined card.
NO_PAYMENT_METHOD = "no_payment_method"

# How far Stripe's search index may trail its writes: under a minute normally, up to an hour
# during incidents (Stripe's search documentation), the very incidents that time calls out.
SEARCH_LAG = timedelta(hours=1)


@dataclass(frozen=True)
class StripeCustomer:
    """Where Stripe keeps one of our customers' card: ids only, never card data."""

    customer: str  # cus_...
    payment_method: str  # pm_...


CustomerLookup = Callable[[int], Awaitable[StripeCustomer | None]]


class _PooledHttpx(stripe.HTTPXClient):
    """The SDK's httpx client with the collector's pool size and timeouts."""

    def __init__(self, *, max_connections: int, connect_timeout: float, read_timeout: float):
        timeout = httpx.Timeout(read_timeout, connect=connect_timeout)
        super().__init__(timeout=timeout)
        # The SDK builds its AsyncClient with httpx's default pool (100 connections, 20 kept
        # alive) and has no parameter for it: replaced here (the unused one never connected).
        # ``_client_async`` is the SDK's attribute; the lock file pins the SDK's version.
        self._client_async = httpx.AsyncClient(
            verify=ssl.create_default_context(cafile=stripe.ca_bundle_path),
            limits=httpx.Limits(
                max_connections=max_connections, max_keepalive_connections=max_connections
            ),
            timeout=timeout,
        )

    def _get_request_args_kwargs(
        self, method: str, url: str, headers: Mapping[str, str], post_data: Any
    ) -> list[Any]:
        """The form body as ``content`` (the SDK passes it as ``data``, which httpx deprecates
        for an already encoded body and warns about on every call)."""
        args, kwargs = super()._get_request_args_kwargs(method, url, headers, None)
        kwargs.pop("data", None)
        if post_data:
            kwargs["content"] = post_data
        return [args, kwargs]


class StripePaymentGateway(OneCallGateway):
    def __init__(
        self,
        api_key: str,
        *,
        customers: CustomerLookup,
        api_base: str = "https://api.stripe.com",
        max_connections: int = 100,
        connect_timeout: float = 2.0,
        read_timeout: float = 10.0,
        search_lag: timedelta = SEARCH_LAG,
    ) -> None:
        self._http = _PooledHttpx(
            max_connections=max_connections,
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
        )
        self._connection = StripeConnection(
            _client(api_key, api_base, self._http), customers, search_lag
        )

    async def aclose(self) -> None:
        await self._http.close_async()  # type: ignore[no-untyped-call]

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[StripeConnection]:
        """Every caller shares the SDK's pool (httpx connects on first use, then keeps it)."""
        yield self._connection


def _client(api_key: str, api_base: str, http: _PooledHttpx) -> stripe.StripeClient:
    return stripe.StripeClient(
        api_key, base_addresses={"api": api_base}, http_client=http, max_network_retries=0
    )


class PaymentMethodNotOurs(DomainError):
    """Stripe does not hold that payment method for that Stripe customer, or the Stripe
    customer is not the one of ours it was offered for."""


class GatewayUnavailable(DomainError):
    """Stripe could not be asked (no answer, 5xx, 429, our credentials refused)."""


class StripePaymentMethods:
    """Checks a payment method before it is saved for one of our customers: Stripe must hold
    it attached to that Stripe customer, and the Stripe customer's metadata ``customer_id``
    must name ours. Every key of a deployment sees every customer: without the check, a key
    could point a customer at someone else's card."""

    def __init__(
        self,
        api_key: str,
        *,
        api_base: str = "https://api.stripe.com",
        connect_timeout: float = 2.0,
        read_timeout: float = 10.0,
    ) -> None:
        self._http = _PooledHttpx(
            max_connections=10, connect_timeout=connect_timeout, read_timeout=read_timeout
        )
        self._client = _client(api_key, api_base, self._http)

    async def aclose(self) -> None:
        await self._http.close_async()  # type: ignore[no-untyped-call]

    async def check(self, customer_id: int, stripe_customer: str, payment_method: str) -> None:
        """Returns when Stripe confirms both; ``PaymentMethodNotOurs`` or
        ``GatewayUnavailable`` otherwise."""
        try:
            method = await self._client.v1.payment_methods.retrieve_async(payment_method)
            customer = await self._client.v1.customers.retrieve_async(stripe_customer)
        except stripe.StripeError as exc:
            status = exc.http_status
            if status in (400, 404):
                raise PaymentMethodNotOurs(_describe(exc)) from None
            log.warning("stripe_payment_method_check_failed", error=_describe(exc))
            raise GatewayUnavailable(_describe(exc)) from None
        refusal = stripe_answers.payment_method_refusal(
            method.to_dict(), customer.to_dict(), stripe_customer, customer_id
        )
        if refusal is not None:
            raise PaymentMethodNotOurs(refusal)


def intent_metadata(
    customer_id: int, idempotency_key: str, metadata: Mapping[str, int | str]
) -> dict[str, str]:
    """Stripe metadata (string values) naming what the charge is for; read back by webhooks and
    look-ups."""
    names = {"invoiceId": "invoice_id", "attempt": "attempt", "subscriptionId": "subscription_id"}
    tagged = {names.get(k, k): str(v) for k, v in metadata.items()}
    return {**tagged, "customer_id": str(customer_id), "idempotency_key": idempotency_key}


class StripeConnection:
    def __init__(
        self, client: stripe.StripeClient, customers: CustomerLookup, search_lag: timedelta
    ) -> None:
        self._client = client
        self._customers = customers
        self._search_lag = search_lag

    async def charge(
        self,
        customer_id: int,
        amount: int,
        currency: str,
        idempotency_key: str,
        metadata: Mapping[str, int | str],
        *,
        send_by: float | None = None,
    ) -> ChargeResult:
        try:
            stripe_amount = stripe_amounts.to_stripe(amount, currency)
        except stripe_amounts.NotBillableAtStripe as exc:
            return ChargeResult(ChargeOutcome.UNKNOWN, error=f"not sent: {exc}", unsent=True)
        on_file = await self._customers(customer_id)
        if on_file is None:
            return ChargeResult(
                ChargeOutcome.DECLINED,
                decline_code=NO_PAYMENT_METHOD,
                error="no Stripe customer and payment method on file; nothing sent",
            )
        _not_late(send_by)
        params: Any = {
            "amount": stripe_amount,
            "currency": currency.lower(),
            "customer": on_file.customer,
            "payment_method": on_file.payment_method,
            "confirm": True,
            "off_session": True,
            "metadata": intent_metadata(customer_id, idempotency_key, metadata),
        }
        try:
            intent = await self._client.v1.payment_intents.create_async(
                params, {"idempotency_key": idempotency_key}
            )
        except stripe.StripeError as exc:
            return _charge_error(exc)
        raw = intent.to_dict()
        outcome, decline_code = stripe_answers.classify_payment_intent(raw)
        return ChargeResult(
            outcome,
            decline_code=decline_code,
            gateway_reference=_text(raw.get("id")),
            http_status=200,
            error=_unsettled(outcome, raw),
        )

    async def refund(
        self,
        charge_reference: str,
        amount: int,
        currency: str,
        idempotency_key: str,
        *,
        send_by: float | None = None,
    ) -> RefundResult:
        try:
            stripe_amount = stripe_amounts.to_stripe(amount, currency)
        except stripe_amounts.NotBillableAtStripe as exc:
            return RefundResult(RefundOutcome.FAILED, error=f"not sent: {exc}")
        _not_late(send_by)
        what = "charge" if charge_reference.startswith("ch_") else "payment_intent"
        params: Any = {
            what: charge_reference,
            "amount": stripe_amount,
            "metadata": {"idempotency_key": idempotency_key},
        }
        try:
            refund = await self._client.v1.refunds.create_async(
                params, {"idempotency_key": idempotency_key}
            )
        except stripe.StripeError as exc:
            status, body = exc.http_status, _body(exc)
            refused = (
                status is not None
                and 400 <= status < 500
                and status not in (401, 403, 429)
                and not stripe_answers.is_transient(body)
            )
            return RefundResult(
                RefundOutcome.FAILED if refused else RefundOutcome.UNKNOWN,
                http_status=status,
                error=_describe(exc),
                retry_after_seconds=_retry_after(exc),
            )
        raw = refund.to_dict()
        outcome, words = stripe_answers.classify_refund(raw)
        return RefundResult(
            outcome,
            gateway_reference=_text(raw.get("id")),
            http_status=200,
            error=words if words else None,
        )

    async def lookup(
        self,
        idempotency_key: str,
        *,
        reference: str | None = None,
        send_by: float | None = None,
    ) -> LookupResult:
        """The PaymentIntent created under the key: ``reference`` (a ``pi_…`` id) read by its id,
        else searched by its metadata, or ``never seen``. Stripe's search index trails writes
        (under a minute usually, up to an hour during incidents): a "never seen" from it carries
        ``index_lag``, and covers only calls made at least that long before. The read by id
        does not lag."""
        _not_late(send_by)
        if reference is not None and reference.startswith("pi_"):
            return await self._read(idempotency_key, reference)
        quoted = idempotency_key.replace("\\", "\\\\").replace("'", "\\'")
        params: Any = {"query": f"metadata['idempotency_key']:'{quoted}'", "limit": 10}
        try:
            found = await self._client.v1.payment_intents.search_async(params)
        except stripe.StripeError as exc:
            return _lookup_error(exc)
        hits = found.to_dict().get("data")
        ours = [
            hit
            for hit in (hits if isinstance(hits, list) else [])
            if isinstance(hit, Mapping) and _metadata(hit).get("idempotency_key") == idempotency_key
        ]
        if not ours:
            return LookupResult(None, http_status=200, index_lag=self._search_lag)
        return lookup_result(ours[0])

    async def _read(self, idempotency_key: str, reference: str) -> LookupResult:
        try:
            intent = (await self._client.v1.payment_intents.retrieve_async(reference)).to_dict()
        except stripe.StripeError as exc:
            return _lookup_error(exc)
        if _metadata(intent).get("idempotency_key") != idempotency_key:
            return LookupResult(
                ChargeOutcome.UNKNOWN,
                http_status=200,
                error=f"lookup: payment intent {reference} is not under {idempotency_key}",
            )
        return lookup_result(intent)


def _lookup_error(exc: stripe.StripeError) -> LookupResult:
    return LookupResult(
        ChargeOutcome.UNKNOWN,
        http_status=exc.http_status,
        error=f"lookup {_describe(exc)}",
        retry_after_seconds=_retry_after(exc),
    )


def lookup_result(intent: Mapping[str, Any]) -> LookupResult:
    """A PaymentIntent found under a key, with what it says it charged (checked against the
    invoice before it is applied)."""
    outcome, decline_code = stripe_answers.classify_payment_intent(intent)
    amount, currency = intent.get("amount"), intent.get("currency")
    if not isinstance(amount, int) or not isinstance(currency, str):
        return LookupResult(
            ChargeOutcome.UNKNOWN,
            http_status=200,
            error="lookup: a payment intent without amount or currency",
        )
    currency = currency.upper()
    ours = stripe_amounts.from_stripe(amount, currency)
    if ours is None:
        return LookupResult(
            ChargeOutcome.UNKNOWN,
            http_status=200,
            error=f"lookup: {amount} {currency} at Stripe is no amount of ours",
        )
    customer = _metadata(intent).get("customer_id")
    return LookupResult(
        outcome,
        decline_code=decline_code,
        gateway_reference=_text(intent.get("id")),
        amount=ours,
        currency=currency,
        customer_id=int(customer) if isinstance(customer, str) and customer.isdigit() else None,
        http_status=200,
        error=_unsettled(outcome, intent),
    )


def _unsettled(outcome: ChargeOutcome, intent: Mapping[str, Any]) -> str | None:
    """Why a PaymentIntent is UNKNOWN (``processing``: its webhook settles it)."""
    return None if outcome != ChargeOutcome.UNKNOWN else f"payment intent {intent.get('status')}"


def _metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    metadata = obj.get("metadata")
    return metadata if isinstance(metadata, Mapping) else {}


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _not_late(send_by: float | None) -> None:
    if send_by is not None and time.monotonic() > send_by:
        raise NotSent


def _body(exc: stripe.StripeError) -> Mapping[str, object] | None:
    body = exc.json_body
    return body if isinstance(body, Mapping) else None


def _describe(exc: stripe.StripeError) -> str:
    if exc.http_status is None:  # no answer: a timeout or a connection error
        return f"stripe no answer: {type(exc).__name__}: {str(exc.user_message or exc)[:300]}"
    return stripe_answers.describe_error(exc.http_status, _body(exc))


def _retry_after(exc: stripe.StripeError) -> float | None:
    if exc.http_status != 429 or not exc.headers:
        return None
    return retry_after_seconds(exc.headers.get("retry-after"))


def _charge_error(exc: stripe.StripeError) -> ChargeResult:
    status, body = exc.http_status, _body(exc)
    outcome, decline_code = stripe_answers.classify_error(status, body)
    intent = stripe_answers.error_object(body).get("payment_intent")
    reference = intent.get("id") if isinstance(intent, Mapping) else None
    return ChargeResult(
        outcome,
        decline_code=decline_code,
        gateway_reference=reference if isinstance(reference, str) else None,
        http_status=status,
        error=None if outcome != ChargeOutcome.UNKNOWN else _describe(exc),
        retry_after_seconds=_retry_after(exc),
        transient=stripe_answers.is_transient(body),
    )
