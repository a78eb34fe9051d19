"""What a Stripe webhook event says about one of our charges (pure: no I/O, no SDK).

* ``payment_intent.succeeded`` -> a SUCCESS report of the attempt named in the PaymentIntent's
  metadata (invoice, attempt, key), with the amount, currency and customer Stripe says it
  charged: recorded by the same rules as the simulator's webhooks and the collector's calls.
* ``payment_intent.payment_failed`` -> a DECLINED report, with Stripe's decline code
  (``authentication_required`` when the bank asked for 3-D Secure).
* ``charge.refunded`` and ``charge.dispute.created`` -> about the PaymentIntent they name
  (``payment_intent``); the receiver decides whether a person must look.

Amounts are Stripe's, read into our minor units (:mod:`billing_core.domain.stripe_amounts`).
A PaymentIntent this deployment did not create (no metadata of ours, or a key without this
deployment's prefix: another system on the same Stripe account), or whose amount is no amount
of ours in its currency, yields no report: the event is acknowledged and kept, never applied.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeGuard

from billing_core.domain.charge_result import ChargeOutcome, GatewayReport, idempotency_key
from billing_core.domain.stripe_amounts import from_stripe
from billing_core.domain.stripe_answers import classify_payment_intent

PAYMENT_SUCCEEDED = "payment_intent.succeeded"
PAYMENT_FAILED = "payment_intent.payment_failed"
CHARGE_REFUNDED = "charge.refunded"
DISPUTE_CREATED = "charge.dispute.created"

_MAX_ID = 100
_MAX_TYPE = 50


class MalformedEvent(ValueError):
    """Not a Stripe event (no id, type or data.object): refused, nothing recorded."""


@dataclass(frozen=True)
class StripeEvent:
    event_id: str
    event_type: str
    invoice_id: int | None
    report: GatewayReport | None  # a charge result for the recorder, if the event is one
    payment_intent: str | None  # the PaymentIntent a refund or dispute is about
    amount: int | None = None  # a refund's or dispute's amount
    currency: str | None = None
    detail: str | None = None  # the dispute's reason, the refund's ids


def read_event(event: object, *, key_prefix: str = "") -> StripeEvent:
    if not isinstance(event, Mapping):
        raise MalformedEvent("the body is not a JSON object")
    event_id, event_type = event.get("id"), event.get("type")
    data = event.get("data")
    obj = data.get("object") if isinstance(data, Mapping) else None
    if not isinstance(event_id, str) or not 0 < len(event_id) <= _MAX_ID:
        raise MalformedEvent(f"id must be a string of 1 to {_MAX_ID} characters")
    if not isinstance(event_type, str) or not 0 < len(event_type) <= _MAX_TYPE:
        raise MalformedEvent(f"type must be a string of 1 to {_MAX_TYPE} characters")
    if not isinstance(obj, Mapping):
        raise MalformedEvent("data.object must be an object")
    if event_type in (PAYMENT_SUCCEEDED, PAYMENT_FAILED):
        return _payment(event_id, event_type, obj, key_prefix)
    if event_type in (CHARGE_REFUNDED, DISPUTE_CREATED):
        intent = obj.get("payment_intent")
        amount, currency = _money(
            obj.get("amount_refunded" if event_type == CHARGE_REFUNDED else "amount"),
            obj.get("currency"),
        )
        reason = obj.get("reason") if event_type == DISPUTE_CREATED else None
        return StripeEvent(
            event_id,
            event_type,
            None,
            None,
            intent if isinstance(intent, str) else None,
            amount=amount,
            currency=currency,
            detail=f"{obj.get('id')} {reason}" if isinstance(reason, str) else _id(obj),
        )
    return StripeEvent(event_id, event_type, None, None, None)


def _payment(
    event_id: str, event_type: str, intent: Mapping[str, object], key_prefix: str
) -> StripeEvent:
    metadata = intent.get("metadata")
    ours = _our_attempt(metadata if isinstance(metadata, Mapping) else {}, key_prefix)
    intent_id = _id(intent)
    if ours is None:
        return StripeEvent(event_id, event_type, None, None, intent_id)
    invoice_id, attempt, key, customer_id = ours
    if event_type == PAYMENT_SUCCEEDED:
        outcome, decline_code = ChargeOutcome.SUCCESS, None
    else:
        # A failed payment's intent is back in requires_payment_method (or requires_action):
        # a decline, with Stripe's code.
        classified, code = classify_payment_intent(intent)
        outcome = ChargeOutcome.DECLINED
        decline_code = code if classified == ChargeOutcome.DECLINED and code else "card_declined"
    amount, currency = _money(intent.get("amount"), intent.get("currency"))
    if amount is None and _is_int(intent.get("amount")):
        # Stripe's amount is none of ours in that currency: never applied unchecked.
        return StripeEvent(event_id, event_type, None, None, intent_id)
    report = GatewayReport(
        attempt_number=attempt,
        outcome=outcome,
        from_webhook=True,
        idempotency_key=key,
        decline_code=decline_code,
        gateway_reference=intent_id,
        amount=amount,
        currency=currency,
        customer_id=customer_id,
    )
    return StripeEvent(event_id, event_type, invoice_id, report, intent_id)


def _our_attempt(
    metadata: Mapping[str, object], key_prefix: str
) -> tuple[int, int, str, int | None] | None:
    """(invoice, attempt, key, customer) when the metadata names one of this deployment's
    attempts, consistently; None otherwise."""
    invoice, attempt, key = (metadata.get(k) for k in ("invoice_id", "attempt", "idempotency_key"))
    customer = metadata.get("customer_id")
    if not (_digits(invoice) and _digits(attempt) and isinstance(key, str)):
        return None
    invoice_id, attempt_number = int(str(invoice)), int(str(attempt))
    if invoice_id < 1 or key != idempotency_key(invoice_id, attempt_number, key_prefix):
        return None
    return invoice_id, attempt_number, key, int(str(customer)) if _digits(customer) else None


def _money(amount: object, currency: object) -> tuple[int | None, str | None]:
    """Stripe's amount in our minor units (None when it is none of ours), and the currency."""
    code = currency.upper() if isinstance(currency, str) else None
    if not _is_int(amount) or code is None:
        return None, code
    return from_stripe(amount, code), code


def _digits(value: object) -> bool:
    return isinstance(value, str) and value.isdigit() and len(value) <= 18


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _id(obj: Mapping[str, object]) -> str | None:
    value = obj.get("id")
    return value if isinstance(value, str) else None
