"""What a gateway answer means, and what it does to the invoice and subscription (§6.2 rules).

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
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from billing_core.domain import events as ev
from billing_core.domain import invoice as invoice_rules
from billing_core.domain import subscription as sub_rules
from billing_core.domain.dunning import DunningPolicy, next_attempt, uncertainty_exhausted
from billing_core.domain.events import DomainEvent
from billing_core.domain.instant import require_aware
from billing_core.domain.invoice import InvoiceState, InvoiceStatus
from billing_core.domain.refund import RefundReason
from billing_core.domain.subscription import SubscriptionState, SubscriptionStatus


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


# A decline the customer can fix by confirming the payment with their bank (3-D Secure), which an
# off-session charge cannot ask for: the PaymentFailed event carries it, so they can be asked.
AUTHENTICATION_REQUIRED = "authentication_required"


def idempotency_key(invoice_id: int, attempt_count: int, prefix: str = "") -> str:
    """The gateway key of one attempt: the same key for a retry after an uncertain result.
    ``prefix`` names the deployment (``prod-``, ``staging-``): two systems sharing one gateway
    account, or a database restored from a backup elsewhere, never reuse each other's keys."""
    return f"{prefix}inv-{invoice_id}-try-{attempt_count}"


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


def classify_lookup(
    http_status: int | None, body: Mapping[str, object] | None
) -> tuple[ChargeOutcome | None, str | None]:
    """Map the answer of a look-up by idempotency key: the charge's outcome and decline code
    when the gateway has the key (200 with the stored charge), ``None`` when it has never seen
    it (404: nothing was charged under that key), UNKNOWN for anything else (no answer, 5xx,
    429, a key still being processed, a malformed body): still uncertain."""
    if http_status == 404:
        return None, None
    if http_status is None or not 200 <= http_status < 300 or not isinstance(body, Mapping):
        return ChargeOutcome.UNKNOWN, None
    status = body.get("status")
    decline_code = _decline_code(body)
    if status == "succeeded":
        return ChargeOutcome.SUCCESS, None
    if status == "declined" and decline_code:
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


# A look-up that found no charge under the key: nothing was taken under it. Recorded as a
# decline of that attempt with this code; only asked for an invoice whose void is requested,
# which it voids.
NOTHING_CHARGED = "no_charge_under_key"


class RecordOutcome(StrEnum):
    """What recording one gateway result did."""

    APPLIED = "APPLIED"
    ALREADY_SETTLED = "ALREADY_SETTLED"
    STALE_ATTEMPT = "STALE_ATTEMPT"
    RECONCILIATION = "RECONCILIATION"
    MISMATCH = "MISMATCH"  # the report does not match the invoice: never applied
    REFUND = "REFUND"  # money the invoice cannot keep: a refund is requested
    NOT_FOUND = "NOT_FOUND"


@dataclass(frozen=True)
class GatewayReport:
    """What the gateway said about one attempt, from the collector's call or from a webhook."""

    attempt_number: int
    outcome: ChargeOutcome
    from_webhook: bool
    idempotency_key: str
    decline_code: str | None = None
    gateway_reference: str | None = None
    # What the gateway says it charged, when it says so (webhooks do): checked, never trusted.
    amount: int | None = None
    currency: str | None = None
    customer_id: int | None = None
    # The gateway refused this call in a way no retry changes (a 4xx other than a decline):
    # recorded as UNKNOWN (nothing known to be charged) and held for a person.
    rejected_because: str | None = None
    # The answer of a look-up by key (what the gateway did with an earlier, uncertain call),
    # not of a charge call: recorded with source LOOKUP, decided like the collector's own.
    from_lookup: bool = False

    @property
    def source(self) -> str:
        """The ``payment_attempt.source`` of this report."""
        if self.from_webhook:
            return "WEBHOOK"
        return "LOOKUP" if self.from_lookup else "COLLECTOR"


@dataclass(frozen=True)
class KeyHistory:
    """What this attempt's key has seen before this report (from the payment_attempt rows)."""

    uncertain_answers: int = 0
    first_used_at: datetime | None = None
    # A success of this key, for this invoice's amount and currency, was recorded before: a
    # success reported again for a PAID invoice is then the same charge, not a second one.
    succeeded_before: bool = False
    # The key was sent: the answer of our own call (or look-up) under it is recorded, or the
    # invoice is leased at its attempt (the call may be at the gateway). A webhook's word for
    # it is not that: a webhook about a key never sent is never applied.
    sent: bool = False
    # Our own call (or look-up) under this key was declined: a success reported for it
    # contradicts the gateway's answer, and a person must look.
    declined_before: bool = False


def report_mismatch(
    invoice: InvoiceState, report: GatewayReport, history: KeyHistory
) -> str | None:
    """Why a report cannot be about this invoice, or None. A signature proves who sent it,
    not that it describes this invoice: a webhook about an attempt never sent, a success that
    would pay under a key our own call saw declined (a closed or PAID invoice refunds it
    instead), a webhook's success that does not say what it charged, or another amount,
    currency or customer, is never applied."""
    attempt = report.attempt_number
    if attempt > invoice.attempt_count or (report.from_webhook and not history.sent):
        return f"attempt {attempt} was never sent (at {invoice.attempt_count})"
    if _contradicts_a_decline(invoice, report, history):
        return f"attempt {attempt} was declined, and a success is reported for it"
    success = report.outcome == ChargeOutcome.SUCCESS
    if success and report.from_webhook:
        unsaid = [
            name
            for name, value in (
                ("amount", report.amount),
                ("currency", report.currency),
                ("customer", report.customer_id),
            )
            if value is None
        ]
        if unsaid:
            return f"a success that names no {', '.join(unsaid)}"
    if report.amount is not None and report.amount != invoice.amount:
        return f"amount {report.amount} is not the invoice's {invoice.amount}"
    if report.currency is not None and report.currency != invoice.currency:
        return f"currency {report.currency} is not the invoice's {invoice.currency}"
    if (
        report.customer_id is not None
        and invoice.customer_id is not None
        and report.customer_id != invoice.customer_id
    ):
        return f"customer {report.customer_id} is not the invoice's {invoice.customer_id}"
    return None


def _contradicts_a_decline(
    invoice: InvoiceState, report: GatewayReport, history: KeyHistory
) -> bool:
    """A success that would pay the invoice under a key our own call saw declined."""
    return (
        report.outcome == ChargeOutcome.SUCCESS
        and history.declined_before
        and invoice.status == InvoiceStatus.OPEN
        and not invoice.void_requested
    )


@dataclass(frozen=True)
class ResultEffect:
    """The new invoice and subscription states, the events, whether the subscription's other
    OPEN invoices are to be voided (cancel for non-payment), whether the charge reported is to
    be refunded (and why), and why a person must look (a reconciliation item), if so."""

    outcome: RecordOutcome
    invoice: InvoiceState
    subscription: SubscriptionState
    events: list[DomainEvent] = field(default_factory=list)
    void_other_open_invoices: bool = False
    refund: RefundReason | None = None
    reconciliation: str | None = None


def apply_result(
    invoice: InvoiceState,
    subscription: SubscriptionState,
    report: GatewayReport,
    *,
    other_invoices_in_dunning: int,
    now: datetime,
    rng: random.Random,
    policy: DunningPolicy = DunningPolicy(),  # noqa: B008 - frozen, immutable default
    key_history: KeyHistory = KeyHistory(),
) -> ResultEffect:
    """Decide from the invoice's CURRENT state, so results may come in any order, any number of
    times:

    * A report that does not match the invoice (``report_mismatch``): never applied; a SUCCESS
      of it needs reconciliation. A look-up's (our own key, charged on other terms) holds the
      OPEN invoice for reconciliation too: no retry under that key can settle it; so does a
      success under a key our own call saw declined (the next attempt could charge twice).
    * PAID: stays PAID; a SUCCESS under a key that had not succeeded before is a second charge:
      refunded (``RefundReason.DUPLICATE_CHARGE``).
    * FAILED/VOID: a SUCCESS is refunded (money was taken for a closed invoice).
    * OPEN with its void requested (canceled while the call was in flight): a SUCCESS for any
      attempt voids it and refunds the money; a DECLINED answer of the current attempt (or a
      refusal no retry changes) voids it; an UNKNOWN one keeps the void requested and the
      invoice is looked up by key later (``retry_later``; once ``uncertainty_exhausted``,
      VOID with a reconciliation item), since the card may have been charged; an older
      attempt's or a webhook's UNKNOWN only is recorded.
      An UNKNOWN of our own call for a VOID invoice's current attempt (voided while the call
      was at the gateway, outside a requested void) needs reconciliation too.
    * OPEN, SUCCESS for any attempt: PAID, since money was taken for this invoice; a PAST_DUE
      subscription is reactivated when no other invoice of it is in dunning.
    * OPEN, DECLINED/UNKNOWN for an older attempt, or UNKNOWN from a webhook: only recorded.
    * OPEN, DECLINED for the current attempt: the dunning schedule's next try (PAST_DUE), or
      FAILED with the subscription canceled for non-payment and its other OPEN invoices voided.
    * OPEN, UNKNOWN for the current attempt: the same attempt again after ``unknown_retry``;
      once ``dunning.uncertainty_exhausted``, held for reconciliation instead (never retried
      by itself: the gateway may have forgotten the key and would charge again).
    """
    require_aware(now, "now")
    refused = _not_applicable(invoice, subscription, report, key_history)
    if refused is not None:
        return refused
    if invoice.void_requested:
        return _void_requested(invoice, subscription, report, key_history, now, policy)
    if report.outcome == ChargeOutcome.SUCCESS:
        paid = invoice_rules.pay(invoice, now)
        events = [ev.invoice_paid(subscription.id, invoice.id, paid.amount, paid.currency, now)]
        state = subscription
        if subscription.status == SubscriptionStatus.PAST_DUE and other_invoices_in_dunning == 0:
            state, reactivated = sub_rules.reactivate(subscription, now, invoice.id)
            events += reactivated
        return ResultEffect(RecordOutcome.APPLIED, paid, state, events)

    if report.outcome == ChargeOutcome.UNKNOWN:
        return _uncertain(invoice, subscription, report, key_history, now, policy)

    retry_at = next_attempt(invoice.attempt_count + 1, now, rng, policy)
    declined = invoice_rules.decline(invoice, now, retry_at)
    events = [
        ev.payment_failed(
            subscription.id, invoice.id, declined.attempt_count, report.decline_code, retry_at
        )
    ]
    if subscription.status == SubscriptionStatus.CANCELED:
        return ResultEffect(RecordOutcome.APPLIED, declined, subscription, events)
    if retry_at is not None:
        state, past_due = sub_rules.mark_past_due(subscription, now, invoice.id)
        return ResultEffect(RecordOutcome.APPLIED, declined, state, events + past_due)
    state, canceled = sub_rules.cancel_for_nonpayment(subscription, now)
    return ResultEffect(
        RecordOutcome.APPLIED, declined, state, events + canceled, void_other_open_invoices=True
    )


def _not_applicable(
    invoice: InvoiceState,
    subscription: SubscriptionState,
    report: GatewayReport,
    history: KeyHistory,
) -> ResultEffect | None:
    """The cases where the report changes no state (at most asks for a refund or a person)."""
    mismatch = report_mismatch(invoice, report, history)
    success = report.outcome == ChargeOutcome.SUCCESS
    if mismatch is not None:
        if not success:
            return ResultEffect(RecordOutcome.MISMATCH, invoice, subscription)
        reason = f"report_mismatch: {mismatch}"
        contradiction = _contradicts_a_decline(invoice, report, history)
        if contradiction or (report.from_lookup and invoice.status == InvoiceStatus.OPEN):
            # Our own key holds a charge on other terms: every retry under it would be refused
            # (or replay that charge). Or money may have been taken under a key dunning has
            # moved past: the next attempt could charge twice. A person must look first.
            held = invoice_rules.hold_for_reconciliation(invoice)
            needed = _reconciliation(held, subscription, report, reason)
            return ResultEffect(
                RecordOutcome.MISMATCH, held, subscription, [needed], reconciliation=reason
            )
        needed = _reconciliation(invoice, subscription, report, reason)
        return ResultEffect(
            RecordOutcome.MISMATCH, invoice, subscription, [needed], reconciliation=reason
        )
    if _uncertain_on_void(invoice, report):
        # Voided while its call was at the gateway, and the answer was lost: no one will claim
        # or look up this invoice again, yet the card may have been charged.
        reason = (
            f"uncertain_on_void: {report.idempotency_key} was at the gateway when the invoice"
            " was voided, and its answer is unknown"
        )
        needed = _reconciliation(invoice, subscription, report, reason)
        return ResultEffect(
            RecordOutcome.RECONCILIATION, invoice, subscription, [needed], reconciliation=reason
        )
    if invoice.status == InvoiceStatus.PAID and success and not history.succeeded_before:
        return ResultEffect(
            RecordOutcome.REFUND, invoice, subscription, refund=RefundReason.DUPLICATE_CHARGE
        )
    if invoice.is_settled and (invoice.status == InvoiceStatus.PAID or not success):
        return ResultEffect(RecordOutcome.ALREADY_SETTLED, invoice, subscription)
    if invoice.is_settled:
        return ResultEffect(
            RecordOutcome.REFUND,
            invoice,
            subscription,
            refund=RefundReason.CHARGED_CLOSED_INVOICE,
        )
    current = report.attempt_number == invoice.attempt_count
    if (report.outcome == ChargeOutcome.UNKNOWN and report.from_webhook) or (
        not current and not success
    ):
        return ResultEffect(RecordOutcome.STALE_ATTEMPT, invoice, subscription)
    return None


def _void_requested(
    invoice: InvoiceState,
    subscription: SubscriptionState,
    report: GatewayReport,
    history: KeyHistory,
    now: datetime,
    policy: DunningPolicy,
) -> ResultEffect:
    """The result of the call that was in flight when the invoice was canceled decides."""
    voided = invoice_rules.void(invoice, now)
    announced = [ev.invoice_voided(subscription.id, invoice.id, now)]
    if report.outcome == ChargeOutcome.SUCCESS:
        return ResultEffect(
            RecordOutcome.REFUND,
            voided,
            subscription,
            announced,
            refund=RefundReason.CANCELED_IN_FLIGHT,
        )
    current = report.attempt_number == invoice.attempt_count
    if not current or (report.outcome == ChargeOutcome.UNKNOWN and report.from_webhook):
        return ResultEffect(RecordOutcome.STALE_ATTEMPT, invoice, subscription)
    if report.outcome == ChargeOutcome.UNKNOWN and report.rejected_because is None:
        # The card may have been charged: voiding now would leave that money unseen if the
        # webhook never comes. The void stays requested; the collector asks the gateway about
        # this key when the retry comes due (a look-up, never a charge) and the answer decides.
        uncertain = _uncertain(invoice, subscription, report, history, now, policy)
        if uncertain.invoice.next_attempt_at is not None or uncertain.reconciliation is None:
            return uncertain
        # The answers stayed uncertain past the bound: the cancel is done, and a person finds
        # out whether money was taken (the item says which key).
        needed = _reconciliation(voided, subscription, report, uncertain.reconciliation)
        return ResultEffect(
            RecordOutcome.RECONCILIATION,
            voided,
            subscription,
            [*announced, needed],
            reconciliation=uncertain.reconciliation,
        )
    return ResultEffect(RecordOutcome.APPLIED, voided, subscription, announced)


def _uncertain_on_void(invoice: InvoiceState, report: GatewayReport) -> bool:
    """An uncertain answer to our own call (not a webhook's, not a refusal that charged
    nothing) for the current attempt of an invoice voided meanwhile."""
    return (
        invoice.status == InvoiceStatus.VOID
        and report.outcome == ChargeOutcome.UNKNOWN
        and not report.from_webhook
        and report.rejected_because is None
        and report.attempt_number == invoice.attempt_count
    )


def _uncertain(
    invoice: InvoiceState,
    subscription: SubscriptionState,
    report: GatewayReport,
    history: KeyHistory,
    now: datetime,
    policy: DunningPolicy,
) -> ResultEffect:
    if report.rejected_because is not None:
        held = invoice_rules.hold_for_reconciliation(invoice)
        reason = f"gateway_rejected: {report.rejected_because}"
        needed = _reconciliation(held, subscription, report, reason)
        return ResultEffect(
            RecordOutcome.RECONCILIATION, held, subscription, [needed], reconciliation=reason
        )
    answers = history.uncertain_answers + 1
    if not uncertainty_exhausted(answers, history.first_used_at, now, policy):
        later = invoice_rules.retry_later(invoice, now + policy.unknown_retry)
        return ResultEffect(RecordOutcome.APPLIED, later, subscription)
    since = (history.first_used_at or now).isoformat()
    reason = (
        f"unknown_unresolved: {answers} uncertain answers for {report.idempotency_key}"
        f" since {since}"
    )
    held = invoice_rules.hold_for_reconciliation(invoice)
    needed = _reconciliation(held, subscription, report, reason)
    return ResultEffect(
        RecordOutcome.RECONCILIATION, held, subscription, [needed], reconciliation=reason
    )


def _reconciliation(
    invoice: InvoiceState, subscription: SubscriptionState, report: GatewayReport, reason: str
) -> DomainEvent:
    return ev.payment_reconciliation_needed(
        subscription.id,
        invoice.id,
        str(invoice.status),
        report.idempotency_key,
        report.gateway_reference,
        reason,
    )
