"""What Stripe's answers mean, in the terms of the gateway port (pure: no I/O, no SDK).

A charge is a PaymentIntent created with ``confirm=true, off_session=true``:

* ``succeeded`` -> SUCCESS.
* ``requires_payment_method`` / ``canceled`` (the card was refused), or a 402 ``card_error`` ->
  DECLINED with Stripe's ``decline_code`` (else its ``code``).
* ``requires_action``, or a ``card_error`` whose code is ``authentication_required``: the bank
  wants 3-D Secure, which an off-session charge cannot do -> DECLINED with
  :data:`AUTHENTICATION_REQUIRED`, so the customer can be asked to authenticate.
* ``processing`` (and any other state) -> UNKNOWN: the webhook settles it.
* Any other error answer -> UNKNOWN; the adapter keeps its HTTP status, so the collector's rules
  for the status apply unchanged: 429 pauses every replica, 401/403 fail closed, 5xx and no
  answer retry with the same key, and another 4xx (``idempotency_error``: the same key sent
  with other parameters) is a refusal no retry changes, held for a person.
"""

from __future__ import annotations

from collections.abc import Mapping

from billing_core.domain.charge_result import AUTHENTICATION_REQUIRED, ChargeOutcome
from billing_core.domain.refund import RefundOutcome

__all__ = ["AUTHENTICATION_REQUIRED", "classify_error", "classify_payment_intent"]

# 4xx answers that say "try again later", not "never": a request under the same key is still
# being processed (409), or a lock could not be taken in time.
TRANSIENT_ERROR_CODES = frozenset({"idempotency_key_in_use", "lock_timeout"})

_DECLINED_STATES = frozenset({"requires_payment_method", "canceled"})


def classify_payment_intent(intent: Mapping[str, object]) -> tuple[ChargeOutcome, str | None]:
    """A PaymentIntent object (a 2xx answer, a search hit, a webhook's ``data.object``)."""
    status = intent.get("status")
    if status == "succeeded":
        return ChargeOutcome.SUCCESS, None
    if status == "requires_action":
        return ChargeOutcome.DECLINED, AUTHENTICATION_REQUIRED
    if status in _DECLINED_STATES:
        error = intent.get("last_payment_error")
        return ChargeOutcome.DECLINED, _card_error_code(error if isinstance(error, Mapping) else {})
    return ChargeOutcome.UNKNOWN, None


def classify_error(
    http_status: int | None, body: Mapping[str, object] | None
) -> tuple[ChargeOutcome, str | None]:
    """An error answer (``{"error": {"type", "code", "decline_code", ...}}``); ``None`` status:
    no answer at all (timeout, connection error)."""
    error = error_object(body)
    if http_status == 402 or error.get("type") == "card_error":
        return ChargeOutcome.DECLINED, _card_error_code(error)
    return ChargeOutcome.UNKNOWN, None


def is_transient(body: Mapping[str, object] | None) -> bool:
    """A 4xx that says "later" rather than "never" (retried with the same key)."""
    return error_object(body).get("code") in TRANSIENT_ERROR_CODES


def error_object(body: Mapping[str, object] | None) -> Mapping[str, object]:
    error = body.get("error") if isinstance(body, Mapping) else None
    return error if isinstance(error, Mapping) else {}


def describe_error(http_status: int | None, body: Mapping[str, object] | None) -> str:
    """``stripe http <status>: <type>/<code>: <message>`` for the attempt's error column."""
    error = error_object(body)
    parts = [str(error[k]) for k in ("type", "code") if isinstance(error.get(k), str)]
    said = "/".join(parts)
    message = error.get("message")
    if isinstance(message, str) and message:
        said = f"{said}: {message[:300]}" if said else message[:300]
    head = f"stripe http {http_status}"
    return f"{head}: {said}" if said else head


def classify_refund(refund: Mapping[str, object]) -> tuple[RefundOutcome, str | None]:
    """A Refund object: ``succeeded`` -> SUCCEEDED; ``failed``/``canceled`` -> FAILED (with
    Stripe's ``failure_reason``); ``pending``/``requires_action`` -> UNKNOWN (asked again
    later under the same key)."""
    status = refund.get("status")
    if status == "succeeded":
        return RefundOutcome.SUCCEEDED, None
    if status in ("failed", "canceled"):
        reason = refund.get("failure_reason")
        return RefundOutcome.FAILED, f"refund {status}: {reason if reason else 'no reason given'}"
    return RefundOutcome.UNKNOWN, None


def _card_error_code(error: Mapping[str, object]) -> str:
    code = error.get("code")
    decline = error.get("decline_code")
    if AUTHENTICATION_REQUIRED in (code, decline):
        return AUTHENTICATION_REQUIRED
    for value in (decline, code):
        if isinstance(value, str) and value:
            return value
    return "card_declined"


# The Stripe customer's metadata key that names our customer id (set when the Stripe customer
# is created, as the PaymentIntents' metadata names it).
CUSTOMER_ID_METADATA = "customer_id"


def payment_method_refusal(
    method: Mapping[str, object],
    customer: Mapping[str, object],
    stripe_customer: str,
    customer_id: int,
) -> str | None:
    """Why a PaymentMethod and a Stripe customer (as Stripe answered them) may not charge our
    customer ``customer_id``, or None: the method must be attached to that Stripe customer, and
    the customer, not deleted, must name ours in its metadata."""
    attached = method.get("customer")
    if isinstance(attached, Mapping):
        attached = attached.get("id")
    if attached != stripe_customer:
        return f"payment method {method.get('id')} is not attached to {stripe_customer}"
    if customer.get("deleted") is True:
        return f"Stripe customer {stripe_customer} is deleted"
    metadata = customer.get("metadata")
    named = metadata.get(CUSTOMER_ID_METADATA) if isinstance(metadata, Mapping) else None
    if named != str(customer_id):
        return (
            f"Stripe customer {stripe_customer} does not name customer {customer_id} in its "
            f"metadata ({CUSTOMER_ID_METADATA}: {named!r})"
        )
    return None
