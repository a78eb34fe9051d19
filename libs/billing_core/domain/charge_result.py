"""What a gateway answer means, and what the invoice does next (the article's §6.2 rules).

* SUCCESS: the invoice is PAID.
* DECLINED (a clear refusal): one more failed attempt, next try from the dunning schedule, or
  FAILED when the schedule is exhausted.
* UNKNOWN (timeout, connection error, 5xx, 429, malformed answer): the attempt count is kept, so
  the retry (after ``unknown_retry``) reuses the same idempotency key and the gateway answers
  with the true result of the earlier try.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from billing_core.domain.dunning import DunningPolicy, next_attempt
from billing_core.domain.instant import require_aware
from billing_core.domain.invoice import InvoiceStatus


class ChargeOutcome(StrEnum):
    SUCCESS = "SUCCESS"
    DECLINED = "DECLINED"
    UNKNOWN = "UNKNOWN"


DECLINE_CODES = frozenset(
    {
        "insufficient_funds",
        "card_declined",
        "expired_card",
        "do_not_honor",
        "lost_card",
        "stolen_card",
        "incorrect_cvc",
        "card_not_supported",
    }
)


def idempotency_key(invoice_id: int, attempt_count: int) -> str:
    """The gateway key of one attempt: the same key for a retry after an uncertain result."""
    return f"inv-{invoice_id}-try-{attempt_count}"


def classify(
    http_status: int | None, body: Mapping[str, object] | None
) -> tuple[ChargeOutcome, str | None]:
    """Map a gateway answer (``None`` status: no answer) to an outcome and a decline code."""
    if http_status is None:
        return ChargeOutcome.UNKNOWN, None
    status = body.get("status") if isinstance(body, Mapping) else None
    decline_code = _decline_code(body)
    if 200 <= http_status < 300:
        if status == "succeeded":
            return ChargeOutcome.SUCCESS, None
        if status == "declined" and decline_code:
            return ChargeOutcome.DECLINED, decline_code
        return ChargeOutcome.UNKNOWN, None
    if http_status == 402:
        return ChargeOutcome.DECLINED, decline_code or "card_declined"
    if 400 <= http_status < 500 and http_status != 429 and decline_code in DECLINE_CODES:
        return ChargeOutcome.DECLINED, decline_code
    return ChargeOutcome.UNKNOWN, None


def _decline_code(body: Mapping[str, object] | None) -> str | None:
    if not isinstance(body, Mapping):
        return None
    for key in ("declineCode", "decline_code"):
        code = body.get(key)
        if isinstance(code, str) and code:
            return code
    return None


SubscriptionAction = str  # "reactivate" | "past_due" | "cancel" | "none"


@dataclass(frozen=True)
class AttemptDecision:
    invoice_status: InvoiceStatus
    attempt_count: int
    next_attempt_at: datetime | None
    subscription_action: SubscriptionAction


def decide(
    outcome: ChargeOutcome,
    attempt_count: int,
    now: datetime,
    rng: random.Random,
    policy: DunningPolicy = DunningPolicy(),  # noqa: B008 - frozen, immutable default
) -> AttemptDecision:
    """What one gateway answer does to the invoice; ``attempt_count``: declines so far."""
    require_aware(now, "now")
    if outcome == ChargeOutcome.SUCCESS:
        return AttemptDecision(InvoiceStatus.PAID, attempt_count, None, "reactivate")
    if outcome == ChargeOutcome.DECLINED:
        failed = attempt_count + 1
        retry_at = next_attempt(failed, now, rng, policy)
        if retry_at is None:
            return AttemptDecision(InvoiceStatus.FAILED, failed, None, "cancel")
        return AttemptDecision(InvoiceStatus.OPEN, failed, retry_at, "past_due")
    return AttemptDecision(InvoiceStatus.OPEN, attempt_count, now + policy.unknown_retry, "none")
