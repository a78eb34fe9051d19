"""The schema, as SQLAlchemy Core tables. Alembic migrations create it; a test checks they agree.

Money is BIGINT minor units, times are TIMESTAMPTZ (UTC), statuses are CHECK-constrained text.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, TIMESTAMP, UUID

from billing_core.domain.charge_result import ChargeOutcome
from billing_core.domain.coupons import Duration
from billing_core.domain.invoice import InvoiceKind, InvoiceStatus
from billing_core.domain.invoice_lines import REDUCING_KINDS, LineKind
from billing_core.domain.period import Interval
from billing_core.domain.refund import RefundStatus
from billing_core.domain.scopes import ALL_SCOPES
from billing_core.domain.subscription import SubscriptionStatus

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING_CONVENTION)

TZ = TIMESTAMP(timezone=True)
NOW = text("now()")

# The domain's enums are the allowed values (CHECK constraints below).
SUBSCRIPTION_STATUSES = tuple(str(s) for s in SubscriptionStatus)
INVOICE_STATUSES = tuple(str(s) for s in InvoiceStatus)
INVOICE_KINDS = tuple(str(k) for k in InvoiceKind)
LINE_KINDS = tuple(str(k) for k in LineKind)
REDUCING_LINE_KINDS = tuple(sorted(str(k) for k in REDUCING_KINDS))
INTERVALS = tuple(str(i) for i in Interval)
ATTEMPT_OUTCOMES = tuple(str(o) for o in ChargeOutcome)
# IMPORT: a payment made before (outside) this system, imported with the history.
# LOOKUP: what a look-up by key said about an earlier, uncertain charge call.
ATTEMPT_SOURCES = ("COLLECTOR", "WEBHOOK", "IMPORT", "LOOKUP")
CREDIT_REASONS = ("DOWNGRADE", "INVOICE", "VOID_REFUND", "ADJUSTMENT")
REFUND_STATUSES = tuple(str(s) for s in RefundStatus)
GATEWAYS = ("stripe",)
SCOPES = tuple(str(s) for s in ALL_SCOPES)
AUDIT_SOURCES = ("API", "CLI")
COUPON_DURATIONS = tuple(str(d) for d in Duration)


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


plan = Table(
    "plan",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("code", String(50), nullable=False, unique=True),
    Column("name", Text, nullable=False),
    Column("price_amount", BigInteger, nullable=False),
    Column("currency", String(3), nullable=False),
    Column("billing_interval", String(10), nullable=False),
    Column("active", Boolean, nullable=False, server_default=text("true")),
    Column("created_at", TZ, nullable=False, server_default=NOW),
    # Days of free trial a new subscription gets unless it asks otherwise (0: none).
    Column("trial_days", Integer, nullable=False, server_default=text("0")),
    CheckConstraint("price_amount >= 0", name="price_non_negative"),
    CheckConstraint("trial_days BETWEEN 0 AND 730", name="trial_days"),
    CheckConstraint("currency ~ '^[A-Z]{3}$'", name="currency_iso4217"),
    CheckConstraint(_in("billing_interval", INTERVALS), name="billing_interval"),
)

# A customer: who subscriptions bill. ``subscription.customer_id``, ``invoice.customer_id`` and
# ``gateway_customer.customer_id`` reference it (the notifier's own tables keep the number it
# learned from events); customers that existed only as those numbers before this table were
# given a row by the migrations (their external id is that number).
customer = Table(
    "customer",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    # The caller's own id for the customer (their CRM's, their user table's): unique.
    Column("external_id", String(255), nullable=False, unique=True),
    Column("email", String(320)),
    Column("name", Text),
    # Defaults for the customer's subscriptions.
    Column("time_zone", Text, nullable=False, server_default=text("'UTC'")),
    Column("currency", String(3)),
    Column("created_at", TZ, nullable=False, server_default=NOW),
    Column("updated_at", TZ, nullable=False, server_default=NOW),
    CheckConstraint("currency ~ '^[A-Z]{3}$'", name="currency_iso4217"),
)

subscription = Table(
    "subscription",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("customer_id", BigInteger, ForeignKey("customer.id"), nullable=False),
    Column("plan_id", BigInteger, ForeignKey("plan.id"), nullable=False),
    Column("status", String(20), nullable=False),
    Column("time_zone", Text, nullable=False, server_default=text("'UTC'")),
    # Period n (0-based) is [boundary(anchor, k), boundary(anchor, k+1)) in time_zone, with
    # k = n - anchor_period_index; computing every boundary from the fixed anchor is what keeps
    # monthly periods from drifting.
    Column("billing_anchor", TZ, nullable=False),
    Column("period_index", Integer, nullable=False, server_default=text("0")),
    # The index of the period that starts at billing_anchor (0 until a plan change to another
    # interval moves the anchor): period n is counted from the anchor as n - anchor_period_index.
    Column("anchor_period_index", Integer, nullable=False, server_default=text("0")),
    Column("current_period_start", TZ, nullable=False),
    Column("current_period_end", TZ, nullable=False),
    Column("cancel_at_period_end", Boolean, nullable=False, server_default=text("false")),
    Column("canceled_at", TZ),
    Column("credit_balance", BigInteger, nullable=False, server_default=text("0")),
    # A free trial's end (null: none). In the trial (status TRIALING, or CANCELED during it)
    # the current period is the trial, [start, trial_end), and trial_end is the billing anchor:
    # the renewer invoices period 0 when it ends.
    Column("trial_end", TZ),
    # When SubscriptionTrialWillEnd was written: once per trial.
    Column("trial_will_end_sent_at", TZ),
    # Collection paused (``pause_behavior`` void | keep_as_draft, null: not paused): periods
    # still renew, but their invoices are created VOID or DRAFT and no invoice of the
    # subscription is collected; ``pause_resumes_at``: when the renewer resumes it (null: on
    # request only).
    Column("pause_behavior", String(20)),
    Column("paused_at", TZ),
    Column("pause_resumes_at", TZ),
    # A plan change asked for the period end: the renewer applies it when it renews (null: none).
    Column("scheduled_plan_id", BigInteger, ForeignKey("plan.id")),
    # Last per-subscription event sequence number handed out (outbox ordering).
    Column("event_seq", BigInteger, nullable=False, server_default=text("0")),
    Column("version", BigInteger, nullable=False, server_default=text("0")),
    Column("created_at", TZ, nullable=False, server_default=NOW),
    Column("updated_at", TZ, nullable=False, server_default=NOW),
    CheckConstraint(_in("status", SUBSCRIPTION_STATUSES), name="status"),
    CheckConstraint("period_index >= 0", name="period_index_non_negative"),
    CheckConstraint(
        "anchor_period_index >= 0 AND anchor_period_index <= period_index",
        name="anchor_period_index",
    ),
    CheckConstraint("current_period_end > current_period_start", name="period_order"),
    CheckConstraint("credit_balance >= 0", name="credit_non_negative"),
    CheckConstraint("pause_behavior IN ('void', 'keep_as_draft')", name="pause_behavior"),
    CheckConstraint(
        "(pause_behavior IS NULL) = (paused_at IS NULL) "
        "AND (pause_resumes_at IS NULL OR paused_at IS NOT NULL)",
        name="pause_complete",
    ),
    Index(
        "idx_sub_due",
        "current_period_end",
        postgresql_where=text("status IN ('ACTIVE', 'TRIALING')"),
    ),
    # Trials whose SubscriptionTrialWillEnd is still to be written, by trial end.
    Index(
        "idx_sub_trial_will_end",
        "current_period_end",
        postgresql_where=text("status = 'TRIALING' AND trial_will_end_sent_at IS NULL"),
    ),
    # Paused subscriptions (the collector leaves their invoices alone).
    Index("idx_sub_paused", "id", postgresql_where=text("paused_at IS NOT NULL")),
    # Paused subscriptions that resume by themselves, by when.
    Index(
        "idx_sub_pause_resumes",
        "pause_resumes_at",
        postgresql_where=text("pause_resumes_at IS NOT NULL"),
    ),
    # A customer's subscriptions, newest first (cursor pages by id).
    Index("ix_subscription_customer_id_id", "customer_id", "id"),
)

invoice = Table(
    "invoice",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("subscription_id", BigInteger, ForeignKey("subscription.id"), nullable=False),
    Column("customer_id", BigInteger, ForeignKey("customer.id"), nullable=False),
    Column("kind", String(20), nullable=False),
    Column("period_index", Integer, nullable=False),
    Column("period_start", TZ, nullable=False),
    Column("period_end", TZ, nullable=False),
    # amount = subtotal - credit_applied: what the gateway is asked to charge.
    Column("subtotal", BigInteger, nullable=False),
    Column("credit_applied", BigInteger, nullable=False, server_default=text("0")),
    Column("amount", BigInteger, nullable=False),
    Column("currency", String(3), nullable=False),
    Column("status", String(20), nullable=False),
    # Number of clearly declined attempts so far; the gateway key is inv-{id}-try-{attempt_count}.
    Column("attempt_count", Integer, nullable=False, server_default=text("0")),
    Column("next_attempt_at", TZ),
    Column("leased_at", TZ),
    Column("paid_at", TZ),
    Column("closed_at", TZ),
    # A cancel while a gateway call may be in flight: still OPEN, and the call's result (or the
    # end of its lease) decides — VOID, or VOID with the money refunded.
    Column("void_requested_at", TZ),
    Column("created_at", TZ, nullable=False, server_default=NOW),
    Column("updated_at", TZ, nullable=False, server_default=NOW),
    # Its document number (billing_core.domain.numbering), given once by the numbering pass.
    Column("number", String(32), unique=True),
    CheckConstraint(_in("status", INVOICE_STATUSES), name="status"),
    CheckConstraint(_in("kind", INVOICE_KINDS), name="kind"),
    CheckConstraint("subtotal >= 0", name="subtotal_non_negative"),
    CheckConstraint("credit_applied >= 0", name="credit_non_negative"),
    CheckConstraint("amount >= 0 AND amount = subtotal - credit_applied", name="amount"),
    CheckConstraint("attempt_count >= 0", name="attempt_count_non_negative"),
    CheckConstraint("period_end > period_start", name="period_order"),
    CheckConstraint("currency ~ '^[A-Z]{3}$'", name="currency_iso4217"),
    # The last safety net against charging twice for a period: one renewal invoice per
    # (subscription, period), whatever the code above it does.
    Index(
        "uq_invoice_renewal_period",
        "subscription_id",
        "period_start",
        unique=True,
        postgresql_where=text("kind = 'RENEWAL'"),
    ),
    Index("idx_inv_retry", "next_attempt_at", postgresql_where=text("status = 'OPEN'")),
    Index(
        "idx_inv_void_requested",
        "next_attempt_at",
        postgresql_where=text("status = 'OPEN' AND void_requested_at IS NOT NULL"),
    ),
    Index("ix_invoice_subscription_id_id", "subscription_id", "id"),
    Index("idx_inv_unnumbered", "id", postgresql_where=text("number IS NULL")),
)

# What an invoice is made of (billing_core.domain.invoice_lines): the invoice's amount is the
# sum of its lines, its credit_applied minus the sum of its CREDIT_APPLIED lines.
invoice_line = Table(
    "invoice_line",
    metadata,
    Column("invoice_id", BigInteger, ForeignKey("invoice.id", ondelete="CASCADE"), nullable=False),
    Column("line_no", Integer, nullable=False),
    Column("kind", String(20), nullable=False),
    Column("description", Text, nullable=False),
    Column("quantity", Integer, nullable=False),
    Column("unit_amount", BigInteger, nullable=False),
    Column("amount", BigInteger, nullable=False),
    Column("period_start", TZ),
    Column("period_end", TZ),
    Column("tax_inclusive", Boolean),  # TAX lines only: inside the prices, or on top
    PrimaryKeyConstraint("invoice_id", "line_no"),
    CheckConstraint("(kind = 'TAX') = (tax_inclusive IS NOT NULL)", name="tax_inclusive"),
    CheckConstraint(_in("kind", LINE_KINDS), name="kind"),
    CheckConstraint("line_no >= 1", name="line_no_positive"),
    CheckConstraint("quantity >= 1", name="quantity_positive"),
    CheckConstraint("amount = quantity * unit_amount", name="amount"),
    CheckConstraint(
        f"({_in('kind', REDUCING_LINE_KINDS)}) = (amount < 0) OR amount = 0", name="sign"
    ),
    CheckConstraint(
        "period_start IS NULL AND period_end IS NULL OR period_end > period_start",
        name="period_order",
    ),
)

payment_attempt = Table(
    "payment_attempt",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("invoice_id", BigInteger, ForeignKey("invoice.id"), nullable=False),
    Column("attempt_number", Integer, nullable=False),
    Column("idempotency_key", String(100), nullable=False),
    Column("source", String(20), nullable=False),
    Column("outcome", String(20), nullable=False),
    Column("amount", BigInteger, nullable=False),
    Column("currency", String(3), nullable=False),
    Column("decline_code", Text),
    Column("gateway_reference", Text),
    Column("error", Text),
    # When the collector sent the call (its process clock); NULL for webhooks and imports.
    Column("requested_at", TZ),
    # When the answer was recorded: a group's answers share one, however their calls were spread.
    Column("recorded_at", TZ, nullable=False, server_default=NOW),
    CheckConstraint(_in("outcome", ATTEMPT_OUTCOMES), name="outcome"),
    CheckConstraint(_in("source", ATTEMPT_SOURCES), name="source"),
    Index("ix_payment_attempt_invoice_id", "invoice_id"),
    Index("ix_payment_attempt_idempotency_key", "idempotency_key"),
    # A gateway event about a charge (a refund, a dispute) names it by the gateway's reference.
    Index(
        "ix_payment_attempt_gateway_reference",
        "gateway_reference",
        postgresql_where=text("gateway_reference IS NOT NULL"),
    ),
)

credit_entry = Table(
    "credit_entry",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("subscription_id", BigInteger, ForeignKey("subscription.id"), nullable=False),
    # Positive: credit granted (downgrade); negative: credit consumed by an invoice.
    Column("amount", BigInteger, nullable=False),
    Column("reason", String(20), nullable=False),
    Column("invoice_id", BigInteger, ForeignKey("invoice.id")),
    Column("created_at", TZ, nullable=False, server_default=NOW),
    CheckConstraint("amount <> 0", name="amount_non_zero"),
    CheckConstraint(_in("reason", CREDIT_REASONS), name="reason"),
    Index("ix_credit_entry_subscription_id", "subscription_id"),
)

outbox_event = Table(
    "outbox_event",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("event_id", UUID(as_uuid=True), nullable=False, unique=True),
    Column("aggregate_id", BigInteger, nullable=False),
    Column("sequence", BigInteger, nullable=False),
    Column("event_type", String(50), nullable=False),
    Column("schema_version", Integer, nullable=False, server_default=text("1")),
    Column("payload", JSONB, nullable=False),
    Column("occurred_at", TZ, nullable=False),
    Column("created_at", TZ, nullable=False, server_default=NOW),
    Column("published_at", TZ),
    Column("publish_attempts", Integer, nullable=False, server_default=text("0")),
    Column("last_error", Text),
    Column("parked_at", TZ),
    UniqueConstraint("aggregate_id", "sequence"),
    Index(
        "idx_outbox_unpublished",
        "id",
        postgresql_where=text("published_at IS NULL AND parked_at IS NULL"),
    ),
    Index("ix_outbox_event_published_at", "published_at"),
)

api_client = Table(
    "api_client",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("name", Text, nullable=False),
    Column("key_prefix", String(16), nullable=False),
    # sha256 of the full key; the key itself is shown once and never stored.
    Column("key_hash", LargeBinary, nullable=False, unique=True),
    Column("created_at", TZ, nullable=False, server_default=NOW),
    Column("revoked_at", TZ),
    # What the key may do (billing_core.domain.scopes); keys from before scopes hold them all.
    Column("scopes", ARRAY(Text), nullable=False),
    Column("expires_at", TZ),
    # Set by the look-up that verifies the key (at most once per auth cache period).
    Column("last_used_at", TZ),
    # Requests per minute; NULL: the API's BILLING_API_RATE_LIMIT_PER_MINUTE.
    Column("rate_limit_per_minute", Integer),
    # The key this one replaced (rotation); the old key stays valid until its expires_at.
    Column("rotated_from_id", BigInteger, ForeignKey("api_client.id")),
    CheckConstraint(
        "scopes <@ ARRAY[" + ", ".join(repr(s) for s in SCOPES) + "]::text[]", name="scopes_known"
    ),
    CheckConstraint("rate_limit_per_minute > 0", name="rate_limit_positive"),
)

# Who changed what through the API (or an operator through the CLI), written in the same
# transaction as the change: the first place support looks (GET /subscriptions/{id}/history).
audit_event = Table(
    "audit_event",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("occurred_at", TZ, nullable=False),
    Column("source", String(10), nullable=False),
    # The API client that made the change (NULL: an operator on the command line).
    Column("client_id", BigInteger, ForeignKey("api_client.id")),
    Column("action", String(50), nullable=False),
    Column("subject_type", String(30), nullable=False),
    Column("subject_id", BigInteger, nullable=False),
    Column("version_before", BigInteger),
    Column("version_after", BigInteger),
    Column("request_id", Text),
    Column("detail", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    CheckConstraint(_in("source", AUDIT_SOURCES), name="source"),
    Index("ix_audit_event_subject", "subject_type", "subject_id", "id"),
)

idempotency_key = Table(
    "idempotency_key",
    metadata,
    Column("client_id", BigInteger, ForeignKey("api_client.id"), nullable=False),
    Column("key", String(255), nullable=False),
    Column("request_method", String(10), nullable=False),
    Column("request_path", Text, nullable=False),
    Column("request_hash", LargeBinary, nullable=False),
    Column("response_status", Integer),
    Column("response_headers", JSONB),
    Column("response_body", LargeBinary),
    Column("created_at", TZ, nullable=False, server_default=NOW),
    Column("completed_at", TZ),
    Column("expires_at", TZ, nullable=False),
    PrimaryKeyConstraint("client_id", "key"),
    Index("ix_idempotency_key_expires_at", "expires_at"),
)

webhook_event = Table(
    "webhook_event",
    metadata,
    Column("event_id", String(100), primary_key=True),
    Column("event_type", String(50), nullable=False),
    Column("invoice_id", BigInteger),
    Column("payload", JSONB, nullable=False),
    Column("received_at", TZ, nullable=False, server_default=NOW),
)

processed_event = Table(
    "processed_event",
    metadata,
    Column("consumer", String(100), nullable=False),
    Column("event_id", UUID(as_uuid=True), nullable=False),
    Column("processed_at", TZ, nullable=False, server_default=NOW),
    PrimaryKeyConstraint("consumer", "event_id"),
)

# The reference notifier's own memory: whom a subscription's e-mails go to, learned from its
# SubscriptionCreated (the only event that names the customer).
notifier_recipient = Table(
    "notifier_recipient",
    metadata,
    Column("subscription_id", BigInteger, primary_key=True),
    Column("customer_id", BigInteger, nullable=False),
    Column("learned_at", TZ, nullable=False, server_default=NOW),
)

# The notifier's outbox of e-mails: one per event at most, written in the transaction that
# records the event as processed, holding the message exactly as it is sent (so a resend is the
# same message, Message-ID included); sent_at is set once the SMTP server accepted it.
notifier_email = Table(
    "notifier_email",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("event_id", UUID(as_uuid=True), nullable=False, unique=True),
    Column("event_type", String(50), nullable=False),
    Column("subscription_id", BigInteger, nullable=False),
    Column("customer_id", BigInteger, nullable=False),
    Column("recipient", String(320), nullable=False),
    Column("subject", Text, nullable=False),
    Column("message_id", Text, nullable=False, unique=True),
    Column("message", LargeBinary, nullable=False),
    # Attempts started (an attempt that died mid-send counts: its outcome is unknown).
    Column("attempts", Integer, nullable=False, server_default=text("0")),
    Column("next_attempt_at", TZ, nullable=False),
    # Set when a message goes to the server, cleared when its outcome is recorded: still set on
    # a row being claimed, the sender died mid-attempt (the server may have the message).
    Column("attempt_started_at", TZ),
    Column("last_error", Text),
    Column("sent_at", TZ),
    # Given up: the server refused it for good, or every attempt failed.
    Column("failed_at", TZ),
    Column("created_at", TZ, nullable=False, server_default=NOW),
    CheckConstraint("attempts >= 0", name="attempts_non_negative"),
    Index(
        "idx_notifier_email_due",
        "next_attempt_at",
        postgresql_where=text("sent_at IS NULL AND failed_at IS NULL"),
    ),
)

refund = Table(
    "refund",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("invoice_id", BigInteger, ForeignKey("invoice.id"), nullable=False),
    Column("subscription_id", BigInteger, ForeignKey("subscription.id"), nullable=False),
    # The SUCCESS payment attempt that asked for it; the refund's key is ref-{this id}.
    Column("payment_attempt_id", BigInteger, ForeignKey("payment_attempt.id"), nullable=False),
    # The charge given back: one refund per charge, however often its success is reported.
    Column("charge_key", String(100), nullable=False, unique=True),
    Column("charge_reference", Text),
    Column("idempotency_key", String(100), nullable=False, unique=True),
    Column("amount", BigInteger, nullable=False),
    Column("currency", String(3), nullable=False),
    Column("reason", String(40), nullable=False),
    Column("status", String(20), nullable=False),
    Column("gateway_reference", Text),
    Column("error", Text),
    Column("uncertain_answers", Integer, nullable=False, server_default=text("0")),
    Column("next_attempt_at", TZ),
    Column("requested_at", TZ, nullable=False),
    Column("completed_at", TZ),
    Column("updated_at", TZ, nullable=False, server_default=NOW),
    # The credit note's number once the refund SUCCEEDED (billing_core.domain.numbering).
    Column("credit_note_number", String(32), unique=True),
    CheckConstraint("amount > 0", name="amount_positive"),
    CheckConstraint("currency ~ '^[A-Z]{3}$'", name="currency_iso4217"),
    CheckConstraint(_in("status", REFUND_STATUSES), name="status"),
    Index("idx_refund_due", "next_attempt_at", postgresql_where=text("status = 'REQUESTED'")),
    Index("ix_refund_invoice_id", "invoice_id"),
    Index(
        "idx_refund_unnumbered",
        "id",
        postgresql_where=text("status = 'SUCCEEDED' AND credit_note_number IS NULL"),
    ),
)

# The counter of each document series (billing_core.domain.numbering): the last number given.
document_series = Table(
    "document_series",
    metadata,
    Column("series", String(20), primary_key=True),
    Column("last_number", BigInteger, nullable=False),
    CheckConstraint("last_number >= 0", name="last_number_non_negative"),
)

# What needs a person: a success that could not be applied, an attempt held after uncertain or
# refused answers, a refund the gateway refused. Resolving one is audited here.
reconciliation_item = Table(
    "reconciliation_item",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("invoice_id", BigInteger, ForeignKey("invoice.id"), nullable=False),
    Column("subscription_id", BigInteger, ForeignKey("subscription.id"), nullable=False),
    Column("kind", String(40), nullable=False),
    Column("reason", Text, nullable=False),
    Column("idempotency_key", String(100)),
    Column("gateway_reference", Text),
    Column("payment_attempt_id", BigInteger, ForeignKey("payment_attempt.id")),
    Column("refund_id", BigInteger, ForeignKey("refund.id")),
    Column("created_at", TZ, nullable=False),
    Column("resolved_at", TZ),
    Column("resolved_by", Text),
    Column("resolution", Text),
    CheckConstraint("(resolved_at IS NULL) = (resolved_by IS NULL)", name="resolved_with_who"),
    Index("idx_reconciliation_open", "id", postgresql_where=text("resolved_at IS NULL")),
    Index("ix_reconciliation_item_invoice_id", "invoice_id"),
)

# Where the payment gateway keeps a customer's card (ids only, never card data): our customer
# -> the gateway's customer and default payment method.
gateway_customer = Table(
    "gateway_customer",
    metadata,
    Column(
        "customer_id", BigInteger, ForeignKey("customer.id"), primary_key=True, autoincrement=False
    ),
    Column("gateway", String(20), nullable=False),
    Column("gateway_customer_id", String(255), nullable=False),
    Column("payment_method_id", String(255), nullable=False),
    Column("created_at", TZ, nullable=False),
    Column("updated_at", TZ, nullable=False),
    CheckConstraint(_in("gateway", GATEWAYS), name="gateway"),
)

# The built-in tax calculator's rates (billing_core.domain.tax): per country, or per country and
# region (region '' = the whole country), in parts per million; inclusive: prices there
# include the tax.
tax_rate = Table(
    "tax_rate",
    metadata,
    Column("country", String(2), nullable=False),
    Column("region", String(10), nullable=False, server_default=text("''")),
    Column("rate_ppm", Integer, nullable=False),
    Column("inclusive", Boolean, nullable=False),
    Column("name", Text, nullable=False),
    PrimaryKeyConstraint("country", "region"),
    CheckConstraint("rate_ppm >= 0 AND rate_ppm < 1000000", name="rate_ppm"),
    CheckConstraint("country ~ '^[A-Z]{2}$'", name="country_iso3166"),
)

# Where a subscription's invoices are taxed (its customer's tax location); none: no tax.
subscription_tax_location = Table(
    "subscription_tax_location",
    metadata,
    Column("subscription_id", BigInteger, ForeignKey("subscription.id"), primary_key=True),
    Column("country", String(2), nullable=False),
    Column("region", String(10), nullable=False, server_default=text("''")),
    Column("updated_at", TZ, nullable=False),
    CheckConstraint("country ~ '^[A-Z]{2}$'", name="country_iso3166"),
)

# Coupons (billing_core.domain.coupons): a percentage (basis points) or an amount off in one
# currency, for ONCE / REPEATING (duration_periods) / FOREVER; times_redeemed counts the
# redemptions against max_redemptions.
coupon = Table(
    "coupon",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("code", String(64), nullable=False, unique=True),
    Column("percent_off_bp", Integer),
    Column("amount_off", BigInteger),
    Column("currency", String(3)),
    Column("duration", String(10), nullable=False),
    Column("duration_periods", Integer),
    Column("max_redemptions", Integer),
    Column("redeem_by", TZ),
    Column("times_redeemed", Integer, nullable=False, server_default=text("0")),
    Column("created_at", TZ, nullable=False, server_default=NOW),
    CheckConstraint("(percent_off_bp IS NULL) <> (amount_off IS NULL)", name="one_discount"),
    CheckConstraint("percent_off_bp > 0 AND percent_off_bp <= 10000", name="percent_off_bp"),
    CheckConstraint("amount_off > 0", name="amount_off_positive"),
    CheckConstraint("(amount_off IS NULL) = (currency IS NULL)", name="currency"),
    CheckConstraint("currency ~ '^[A-Z]{3}$'", name="currency_iso4217"),
    CheckConstraint(_in("duration", COUPON_DURATIONS), name="duration"),
    CheckConstraint(
        "(duration = 'REPEATING') = (duration_periods IS NOT NULL) AND duration_periods >= 1",
        name="duration_periods",
    ),
    CheckConstraint("max_redemptions >= 1", name="max_redemptions_positive"),
    CheckConstraint(
        "times_redeemed >= 0 AND (max_redemptions IS NULL OR times_redeemed <= max_redemptions)",
        name="times_redeemed",
    ),
)

# A subscription's redeemed coupon: it discounts the invoices of the periods from_period <=
# index < until_period (NULL: no end). One per subscription.
subscription_discount = Table(
    "subscription_discount",
    metadata,
    Column("subscription_id", BigInteger, ForeignKey("subscription.id"), primary_key=True),
    Column("coupon_code", String(64), ForeignKey("coupon.code"), nullable=False),
    Column("from_period", Integer, nullable=False),
    Column("until_period", Integer),
    Column("applied_at", TZ, nullable=False),
    CheckConstraint("from_period >= 0", name="from_period_non_negative"),
    CheckConstraint("until_period > from_period", name="until_after_from"),
)

ALL_TABLES = [t.name for t in metadata.sorted_tables]
