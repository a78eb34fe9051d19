"""Bulk seeding of realistic subscriptions (``billing seed``, demos, benchmarks, tests).

:func:`seed_subscriptions` creates N ACTIVE subscriptions on the plans of the ``plan`` table,
each of its own customer (ids ``first_customer_id`` on, created first by :func:`seed_customers`
in one set-based statement, with an e-mail address when asked for), a mix of IANA time zones
(including zones with daylight saving time) and billing anchors chosen so that
``current_period_end`` falls in a given window: spread over 24 hours "as on the 1st of the
month", or all within a few minutes for a demo. Every period field is computed by the domain's
drift-free period functions, so the renewer continues the rows exactly. Rows go in with
``COPY`` (asyncpg), in chunks, reporting progress through a callback.

:func:`seed_filler_sql` adds many subscriptions in one ``INSERT ... SELECT generate_series``
statement, entirely inside PostgreSQL (their customers too, the same way): UTC, monthly plans,
periods computed by PostgreSQL's own month arithmetic (which clamps to the month's last day
exactly like the domain does in UTC). It exists to build large tables quickly (e.g. millions of
subscriptions that are not due).

:func:`seed_mix` turns shares of them into taxed, trialing, paused, plan-changing and
discounted subscriptions (:func:`seed_tax_mix`, :func:`seed_lifecycle_mix`,
:func:`seed_coupon_mix`), set-based too.

:func:`seed_history` writes what the seeded subscriptions imply happened before: every period
0..current invoiced and paid, and the seeded credit in the credit ledger. Those payments were
made before (outside) this system, so each is recorded as a SUCCESS payment attempt with source
``IMPORT``: the invariant checker takes it as the invoice's one charge, which the gateway ledger
cannot show, and expects no ``InvoicePaid`` event for it.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from billing_core.db.arrays import (
    bool_array,
    instant_array,
    instant_sql,
    int_array,
    text_array,
)
from billing_core.db.pg import Connection, Statement, execute, fetch, fetchval
from billing_core.domain import period as period_rules
from billing_core.domain.subscription import SubscriptionStatus

ProgressCallback = Callable[[int, int], None]

# A mix of zones with and without daylight saving time, both hemispheres, odd offsets.
DEFAULT_TIME_ZONES: tuple[str, ...] = (
    "Europe/Paris",
    "Europe/London",
    "America/New_York",
    "America/Los_Angeles",
    "America/Sao_Paulo",
    "Australia/Sydney",
    "Asia/Tokyo",
    "Asia/Kolkata",
    "Pacific/Auckland",
    "UTC",
)

_COLUMNS = (
    "customer_id",
    "plan_id",
    "status",
    "time_zone",
    "billing_anchor",
    "period_index",
    "current_period_start",
    "current_period_end",
    "cancel_at_period_end",
    "credit_balance",
)


@dataclass(frozen=True, slots=True)
class SeedSpec:
    """What to seed. Due times are uniform in ``[due_from, due_from + due_window)``."""

    count: int
    due_from: datetime
    due_window: timedelta
    time_zones: Sequence[str] = DEFAULT_TIME_ZONES
    plan_codes: Sequence[str] | None = None  # None: every active plan
    first_customer_id: int = 1
    credit_share: float = 0.0  # share of subscriptions holding some credit
    cancel_share: float = 0.0  # share flagged cancel_at_period_end
    max_past_periods: int = 11  # how old the monthly subscriptions are, at most
    random_seed: int = 0
    chunk_size: int = 20_000
    # Customers' e-mail addresses: customer-<id>@<this domain> (None: no address).
    email_domain: str | None = None


@dataclass(frozen=True, slots=True)
class SeedReport:
    inserted: int
    first_due: datetime | None
    last_due: datetime | None


@dataclass(frozen=True, slots=True)
class _Plan:
    id: int
    price_amount: int
    interval: period_rules.Interval


# Customers with the ids [first_id, last_id], each its id as external id (as the migrations gave
# customer numbers in use before customers existed), with an address at the domain if given;
# ids taken are left as they are.
_CUSTOMERS = Statement(
    """
    INSERT INTO customer (id, external_id, email)
    SELECT g, g::text, 'customer-' || g || '@' || CAST(:email_domain AS text)
    FROM generate_series(CAST(:first_id AS bigint), CAST(:last_id AS bigint)) AS g
    ON CONFLICT DO NOTHING
    """
)

# Customers created through the API take ids from the sequence: it moves past the seeded ones.
_SEQUENCE_PAST_CUSTOMERS = Statement(
    """
    SELECT setval(pg_get_serial_sequence('customer', 'id'), top.id)
    FROM (SELECT max(id) AS id FROM customer) AS top, customer_id_seq AS seq
    WHERE top.id >= seq.last_value + CASE WHEN seq.is_called THEN 1 ELSE 0 END
    """
)

_PLANS = Statement(
    """
    SELECT id, price_amount, billing_interval FROM plan
    WHERE active
      AND (CAST(:codes AS text)::text[] IS NULL OR code = ANY(CAST(:codes AS text)::text[]))
    ORDER BY id
    """
)

# The seed of random() for the set-based statements that follow on the connection.
_SET_SEED = Statement("SELECT setseed(CAST(:seed AS float8))")


async def seed_customers(
    conn: Connection, *, first_id: int, count: int, email_domain: str | None = None
) -> int:
    """Customers ``first_id`` .. ``first_id + count - 1`` in one statement (those that exist
    are kept), each with the address ``customer-<id>@<email_domain>`` when a domain is given;
    the id sequence then moves past them. Returns how many were inserted."""
    if count <= 0:
        return 0
    inserted = await execute(
        conn,
        _CUSTOMERS,
        {"first_id": first_id, "last_id": first_id + count - 1, "email_domain": email_domain},
    )
    await execute(conn, _SEQUENCE_PAST_CUSTOMERS)
    return inserted


async def _plans(conn: Connection, codes: Sequence[str] | None) -> list[_Plan]:
    rows = await fetch(conn, _PLANS, {"codes": None if codes is None else text_array(codes)})
    if not rows:
        raise ValueError(f"no active plan matches {codes!r}")
    return [
        _Plan(r["id"], r["price_amount"], period_rules.Interval(r["billing_interval"]))
        for r in rows
    ]


def _shift_months(local: datetime, months: int) -> datetime | None:
    """``local`` moved back by ``months`` months, same day and wall time; None if that day
    does not exist in the target month."""
    total = local.year * 12 + local.month - 1 - months
    year, month0 = divmod(total, 12)
    try:
        return local.replace(year=year, month=month0 + 1)
    except ValueError:
        return None


def place(
    due: datetime, tz: str, interval: period_rules.Interval, periods_ago: int
) -> tuple[datetime, int, period_rules.Period]:
    """An anchor, period index and current period such that the period ends at ``due`` (or as
    close as the calendar allows: a wall time that does not exist on the anchor's day moves by
    the DST shift). The period fields come from the domain's period functions."""
    zone = ZoneInfo(tz)
    local = due.astimezone(zone)
    step = 1 if interval == period_rules.Interval.MONTH else 12
    # Try the requested age first, then whole years back (same month: the day always exists,
    # but Feb 29), then leap-year multiples.
    candidates = [periods_ago, *(12 // step * y - 1 for y in (1, 2, 4))]
    best: tuple[datetime, int, period_rules.Period] | None = None
    for n in candidates:
        if n < 0:
            continue
        anchor_local = _shift_months(local, (n + 1) * step)
        if anchor_local is None:
            continue
        anchor = anchor_local.astimezone(UTC)
        current = period_rules.period_bounds(anchor, interval, n, tz)
        if current.end == due:
            return anchor, n, current
        if best is None:
            best = (anchor, n, current)
    if best is None:  # pragma: no cover - Feb 29 four years back always exists
        raise ValueError(f"cannot place a period ending at {due.isoformat()} in {tz}")
    return best


async def seed_subscriptions(
    conn: Connection, spec: SeedSpec, *, progress: ProgressCallback | None = None
) -> SeedReport:
    """Insert ``spec.count`` subscriptions with the driver's COPY, in chunks;
    ``progress(done, total)``."""
    if spec.count < 0:
        raise ValueError("count must be >= 0")
    if spec.due_from.tzinfo is None:
        raise ValueError("due_from must be timezone-aware")
    plans = await _plans(conn, spec.plan_codes)
    await seed_customers(
        conn, first_id=spec.first_customer_id, count=spec.count, email_domain=spec.email_domain
    )
    # Hold every zone: ZoneInfo(tz) then stays a cache hit for the domain's period functions.
    zones = [ZoneInfo(tz) for tz in spec.time_zones]
    rng = random.Random(spec.random_seed)
    window_us = max(1, int(spec.due_window.total_seconds() * 1_000_000))
    due_from = spec.due_from.astimezone(UTC)
    first_due: datetime | None = None
    last_due: datetime | None = None
    done = 0
    if progress:
        progress(0, spec.count)
    while done < spec.count:
        size = min(spec.chunk_size, spec.count - done)
        records = []
        for i in range(done, done + size):
            plan = plans[rng.randrange(len(plans))]
            tz = spec.time_zones[rng.randrange(len(spec.time_zones))]
            due = (due_from + timedelta(microseconds=rng.randrange(window_us))).replace(
                microsecond=0
            )
            ago = rng.randint(0, spec.max_past_periods)
            if plan.interval == period_rules.Interval.YEAR:
                ago = min(ago, 2)
            anchor, index, current = place(due, tz, plan.interval, ago)
            credit = 0
            if spec.credit_share and rng.random() < spec.credit_share:
                credit = rng.choice((plan.price_amount // 2, plan.price_amount * 2, 100))
            cancel = bool(spec.cancel_share) and rng.random() < spec.cancel_share
            records.append(
                (
                    spec.first_customer_id + i,
                    plan.id,
                    str(SubscriptionStatus.ACTIVE),
                    tz,
                    anchor,
                    index,
                    current.start,
                    current.end,
                    cancel,
                    credit,
                )
            )
            first_due = current.end if first_due is None else min(first_due, current.end)
            last_due = current.end if last_due is None else max(last_due, current.end)
        await conn.copy_records_to_table("subscription", records=records, columns=_COLUMNS)
        done += size
        if progress:
            progress(done, spec.count)
    del zones
    return SeedReport(inserted=spec.count, first_due=first_due, last_due=last_due)


# A small rate table for seeded worlds (benchmarks, demos): VAT inside the price, a US state's
# sales tax on top of it, and a country without tax.
SEED_TAX_RATES = (
    ("FR", "", 200_000, True, "VAT"),
    ("DE", "", 190_000, True, "VAT"),
    ("US", "NY", 88_750, False, "Sales tax"),
    ("US", "", 0, False, "Sales tax"),
)
_SEED_LOCATIONS = ("FR", "", "DE", "", "US", "NY", "US", "OR")


_TAX_RATES = Statement(
    """
    INSERT INTO tax_rate (country, region, rate_ppm, inclusive, name)
    SELECT * FROM unnest(
        CAST(:countries AS text)::text[], CAST(:regions AS text)::text[],
        CAST(:rates_ppm AS text)::int[], CAST(:inclusive AS text)::boolean[],
        CAST(:names AS text)::text[])
    ON CONFLICT DO NOTHING
    """
)

# Subscription s gets the location at (s.id % 4) in the (country, region) pairs given.
_TAX_LOCATIONS = Statement(
    """
    INSERT INTO subscription_tax_location (subscription_id, country, region, updated_at)
    SELECT s.id, (CAST(:locations AS text)::text[])[1 + 2 * (s.id % 4)],
           (CAST(:locations AS text)::text[])[2 + 2 * (s.id % 4)], now()
    FROM subscription s
    WHERE s.customer_id >= :first_customer_id AND random() < CAST(:share AS float8)
    ON CONFLICT (subscription_id) DO NOTHING
    """
)


async def seed_tax_mix(
    conn: Connection, *, share: float, first_customer_id: int = 1, random_seed: float = 0.5
) -> int:
    """Give ``share`` of the subscriptions of customers from ``first_customer_id`` on a tax
    location (France, Germany, New York, Oregon in turn), and insert :data:`SEED_TAX_RATES`
    where absent. Returns how many locations were written."""
    if not 0 <= share <= 1:
        raise ValueError("share must be in [0, 1]")
    await execute(
        conn,
        _TAX_RATES,
        {
            "countries": text_array(r[0] for r in SEED_TAX_RATES),
            "regions": text_array(r[1] for r in SEED_TAX_RATES),
            "rates_ppm": int_array(r[2] for r in SEED_TAX_RATES),
            "inclusive": bool_array(r[3] for r in SEED_TAX_RATES),
            "names": text_array(r[4] for r in SEED_TAX_RATES),
        },
    )
    await execute(conn, _SET_SEED, {"seed": random_seed})
    return await execute(
        conn,
        _TAX_LOCATIONS,
        {
            "locations": text_array(_SEED_LOCATIONS),
            "first_customer_id": first_customer_id,
            "share": share,
        },
    )


# The seeded lifecycle mix: the subscriptions of customers from ``first_customer_id`` on that
# are plain ACTIVE renewals (no cancel scheduled, no pause, no scheduled change), each picked
# with ``chance``.
_PLAIN = """
    s.customer_id >= :first_customer_id AND s.status = 'ACTIVE' AND NOT s.cancel_at_period_end
    AND s.pause_behavior IS NULL AND s.scheduled_plan_id IS NULL
    AND random() < CAST(:chance AS float8)
"""

# In a 14-day trial ending when its period was due (the trial end is the billing anchor: the
# renewer invoices period 0 then), its SubscriptionTrialWillEnd already written 3 days before.
_TRIALS = Statement(
    f"""
    UPDATE subscription s
    SET status = 'TRIALING', billing_anchor = s.current_period_end, period_index = 0,
        current_period_start = s.current_period_end - interval '14 days',
        trial_end = s.current_period_end,
        trial_will_end_sent_at = s.current_period_end - interval '3 days'
    WHERE {_PLAIN}
    """
)

# Collection paused since its current period started, until resumed on request: half void,
# half keep_as_draft (the renewer creates the next period's invoice VOID or DRAFT).
_PAUSES = Statement(
    f"""
    UPDATE subscription s
    SET pause_behavior = CASE WHEN s.id % 2 = 0 THEN 'void' ELSE 'keep_as_draft' END,
        paused_at = s.current_period_start
    WHERE {_PLAIN}
    """
)

# A change to another plan of the same currency and interval, scheduled for the period end
# (plans without such a neighbour are not picked).
_SCHEDULED_CHANGES = Statement(
    f"""
    UPDATE subscription s
    SET scheduled_plan_id = alt.id
    FROM plan p,
         LATERAL (SELECT p2.id FROM plan p2
                  WHERE p2.active AND p2.id <> p.id AND p2.currency = p.currency
                    AND p2.billing_interval = p.billing_interval
                  ORDER BY p2.id LIMIT 1) AS alt
    WHERE p.id = s.plan_id AND {_PLAIN}
    """
)


@dataclass(frozen=True, slots=True)
class LifecycleMix:
    trials: int
    pauses: int
    scheduled_changes: int


async def seed_lifecycle_mix(
    conn: Connection,
    *,
    trial_share: float,
    pause_share: float,
    scheduled_change_share: float,
    first_customer_id: int = 1,
    random_seed: float = 0.25,
) -> LifecycleMix:
    """Turn shares of the plain ACTIVE subscriptions of customers from ``first_customer_id``
    on (disjoint groups, each a share of all of them) into trials ending when they are due,
    paused ones (void or keep_as_draft) and ones with a plan change scheduled for the period
    end, with set-based UPDATEs. Seeded subscriptions have no history of these (no events)."""
    shares = (trial_share, pause_share, scheduled_change_share)
    if any(not 0 <= share <= 1 for share in shares) or sum(shares) > 1:
        raise ValueError("shares must be in [0, 1] and add up to at most 1")
    await execute(conn, _SET_SEED, {"seed": random_seed})
    done: list[int] = []
    left = 1.0
    for statement, share in zip((_TRIALS, _PAUSES, _SCHEDULED_CHANGES), shares, strict=True):
        # Each group is picked among what the earlier ones left: its chance there is larger.
        chance = 0.0 if left <= 0 else min(1.0, share / left)
        params = {"first_customer_id": first_customer_id, "chance": chance}
        done.append(await execute(conn, statement, params))
        left -= share
    return LifecycleMix(*done)


# The seeded coupon: 10 % off three periods.
SEED_COUPON = "SEED-10-OFF-3"

_COUPON = Statement(
    """
    INSERT INTO coupon (code, percent_off_bp, duration, duration_periods)
    VALUES (:code, 1000, 'REPEATING', 3)
    ON CONFLICT (code) DO NOTHING
    """
)

# Redeemed from the next period on (the one the renewer invoices next) by ``share`` of the
# ACTIVE subscriptions of customers from ``first_customer_id`` on without a discount; the
# coupon counts its redemptions.
_DISCOUNTS = Statement(
    """
    WITH redeemed AS (
        INSERT INTO subscription_discount (subscription_id, coupon_code, from_period,
                                           until_period, applied_at)
        SELECT s.id, :code, s.period_index + 1, s.period_index + 4, s.current_period_start
        FROM subscription s
        WHERE s.customer_id >= :first_customer_id AND s.status = 'ACTIVE'
          AND random() < CAST(:share AS float8)
        ON CONFLICT (subscription_id) DO NOTHING
        RETURNING subscription_id
    ),
    counted AS (SELECT count(*) AS n FROM redeemed)
    UPDATE coupon SET times_redeemed = times_redeemed + counted.n
    FROM counted WHERE coupon.code = :code
    RETURNING counted.n
    """
)


async def seed_coupon_mix(
    conn: Connection, *, share: float, first_customer_id: int = 1, random_seed: float = 0.75
) -> int:
    """Redeem :data:`SEED_COUPON` (created where absent) for ``share`` of the ACTIVE
    subscriptions of customers from ``first_customer_id`` on, from their next period on.
    Returns how many were given it."""
    if not 0 <= share <= 1:
        raise ValueError("share must be in [0, 1]")
    await execute(conn, _COUPON, {"code": SEED_COUPON})
    await execute(conn, _SET_SEED, {"seed": random_seed})
    params = {"code": SEED_COUPON, "first_customer_id": first_customer_id, "share": share}
    return int(await fetchval(conn, _DISCOUNTS, params))


@dataclass(frozen=True, slots=True)
class SeedMix:
    """Shares of the seeded subscriptions that are taxed, in a trial, paused, with a plan
    change scheduled, or with a coupon (:func:`seed_mix`)."""

    tax_share: float = 0.5
    trial_share: float = 0.05
    pause_share: float = 0.02
    scheduled_change_share: float = 0.05
    coupon_share: float = 0.1


@dataclass(frozen=True, slots=True)
class MixReport:
    taxed: int
    lifecycle: LifecycleMix
    discounted: int


async def seed_mix(conn: Connection, mix: SeedMix, *, first_customer_id: int = 1) -> MixReport:
    """The taxes, lifecycle states and coupons of :class:`SeedMix` on the subscriptions of
    customers from ``first_customer_id`` on (before their history: trials have none)."""
    taxed = await seed_tax_mix(conn, share=mix.tax_share, first_customer_id=first_customer_id)
    lifecycle = await seed_lifecycle_mix(
        conn,
        trial_share=mix.trial_share,
        pause_share=mix.pause_share,
        scheduled_change_share=mix.scheduled_change_share,
        first_customer_id=first_customer_id,
    )
    discounted = await seed_coupon_mix(
        conn, share=mix.coupon_share, first_customer_id=first_customer_id
    )
    return MixReport(taxed, lifecycle, discounted)


# ``count`` UTC monthly subscriptions due in the window, customers from ``first_customer_id`` on.
_FILLER = Statement(
    """
    WITH p AS (
        SELECT array_agg(id ORDER BY id) AS ids FROM plan
        WHERE active AND billing_interval = 'MONTH'
    ),
    g AS (
        SELECT g AS i,
               date_trunc('second', (CAST(:due_from AS timestamptz) AT TIME ZONE 'UTC')
                   + random() * CAST(:due_window AS interval)) AS due_local,
               (random() * CAST(:max_past_periods AS int))::int AS n
        FROM generate_series(0, CAST(:count AS int) - 1) AS g
    ),
    a AS (
        SELECT i, n, due_local - make_interval(months => n + 1) AS anchor_local FROM g
    )
    INSERT INTO subscription (customer_id, plan_id, status, time_zone, billing_anchor,
                              period_index, current_period_start, current_period_end)
    SELECT CAST(:first_customer_id AS bigint) + a.i, p.ids[1 + a.i % array_length(p.ids, 1)],
           'ACTIVE', 'UTC', a.anchor_local AT TIME ZONE 'UTC', a.n,
           (a.anchor_local + make_interval(months => a.n)) AT TIME ZONE 'UTC',
           (a.anchor_local + make_interval(months => a.n + 1)) AT TIME ZONE 'UTC'
    FROM a, p
    """
)


async def seed_filler_sql(
    conn: Connection,
    *,
    count: int,
    due_from: datetime,
    due_window: timedelta,
    first_customer_id: int = 1,
    max_past_periods: int = 11,  # how old they are, at most
    random_seed: float = 0.5,  # setseed(): in [-1, 1]
) -> int:
    """Insert ``count`` UTC monthly ACTIVE subscriptions due in the window, in one statement
    (and their customers, in another)."""
    if count <= 0:
        return 0
    await seed_customers(conn, first_id=first_customer_id, count=count)
    await execute(conn, _SET_SEED, {"seed": random_seed})
    return await execute(
        conn,
        _FILLER,
        {
            "count": count,
            "due_from": due_from,
            "due_window": due_window,
            "first_customer_id": first_customer_id,
            "max_past_periods": max_past_periods,
        },
    )


# What a statement that creates PAID invoices (CTE ``inv``) adds to each: its one line (the
# period) and its imported payment (only for the invoices written there: RETURNING, not a
# search).
_IMPORTED_PAYMENT = """
, lines AS (
    INSERT INTO invoice_line (invoice_id, line_no, kind, description, quantity, unit_amount,
                              amount, period_start, period_end)
    SELECT id, 1, 'PLAN_PERIOD', 'Subscription period', 1, amount, amount, period_start,
           period_end
    FROM inv
)
INSERT INTO payment_attempt (invoice_id, attempt_number, idempotency_key, source, outcome,
                             amount, currency, recorded_at)
SELECT id, 0, 'import-inv-' || id, 'IMPORT', 'SUCCESS', amount, currency, paid_at FROM inv
"""

# The current period's invoice of each seeded subscription that has none, PAID at its start
# (none in a trial: its first period is invoiced when the trial ends).
_CURRENT_PERIOD = Statement(
    """
    WITH inv AS (
        INSERT INTO invoice (subscription_id, customer_id, kind, period_index, period_start,
                             period_end, subtotal, amount, currency, status, paid_at, closed_at)
        SELECT s.id, s.customer_id, 'RENEWAL', s.period_index, s.current_period_start,
               s.current_period_end, p.price_amount, p.price_amount, p.currency, 'PAID',
               s.current_period_start, s.current_period_start
        FROM subscription s JOIN plan p ON p.id = s.plan_id
        WHERE s.customer_id >= :first_customer_id
          AND NOT (s.status = 'TRIALING' AND s.current_period_end = s.trial_end)
          AND NOT EXISTS (SELECT 1 FROM invoice i WHERE i.subscription_id = s.id)
        RETURNING id, amount, currency, paid_at, period_start, period_end
    )
    """
    + _IMPORTED_PAYMENT
)

# Earlier periods (a subscription placed at period n > 0 was paid for 0..n-1 too).
_PAST_PERIODS = Statement(
    """
    SELECT s.id, s.customer_id, s.billing_anchor, s.time_zone, s.period_index,
           p.billing_interval, p.price_amount, p.currency
    FROM subscription s JOIN plan p ON p.id = s.plan_id
    WHERE s.customer_id >= :first_customer_id AND s.period_index > 0
      AND NOT EXISTS (SELECT 1 FROM invoice i WHERE i.subscription_id = s.id
                      AND i.kind = 'RENEWAL' AND i.period_index < s.period_index)
    ORDER BY s.id
    """
)

_PAST_INVOICES = Statement(
    f"""
    WITH inv AS (
        INSERT INTO invoice (subscription_id, customer_id, kind, period_index, period_start,
                             period_end, subtotal, amount, currency, status, paid_at, closed_at)
        SELECT t.sub, t.customer, 'RENEWAL', t.n, {instant_sql("t.start_at")},
               {instant_sql("t.end_at")}, t.price, t.price, t.currency, 'PAID',
               {instant_sql("t.start_at")}, {instant_sql("t.start_at")}
        FROM unnest(CAST(:subscription_ids AS text)::bigint[],
                    CAST(:customer_ids AS text)::bigint[], CAST(:period_indexes AS text)::int[],
                    CAST(:starts AS text)::bigint[], CAST(:ends AS text)::bigint[],
                    CAST(:prices AS text)::bigint[], CAST(:currencies AS text)::text[])
             AS t(sub, customer, n, start_at, end_at, price, currency)
        RETURNING id, amount, currency, paid_at, period_start, period_end
    )
    """
    + _IMPORTED_PAYMENT
)

_CREDIT = Statement(
    """
    INSERT INTO credit_entry (subscription_id, amount, reason)
    SELECT s.id, s.credit_balance, 'ADJUSTMENT' FROM subscription s
    WHERE s.customer_id >= :first_customer_id AND s.credit_balance > 0
      AND NOT EXISTS (SELECT 1 FROM credit_entry c WHERE c.subscription_id = s.id)
    """
)


@dataclass(frozen=True, slots=True)
class HistoryReport:
    invoices: int  # PAID invoices written, each with its imported payment
    credit_entries: int


async def seed_history(conn: Connection, *, first_customer_id: int) -> HistoryReport:
    """The paid history of the subscriptions of customers from ``first_customer_id`` on that
    have none yet and are not in a trial: a PAID RENEWAL invoice for each period 0..current
    (bounds from the domain's period functions), each with a SUCCESS payment attempt of source
    IMPORT, and an ADJUSTMENT credit entry for a seeded credit balance. In the caller's
    transaction."""
    seeded = {"first_customer_id": first_customer_id}
    current = await execute(conn, _CURRENT_PERIOD, seeded)
    past = [
        (r, n, bounds)
        for r in await fetch(conn, _PAST_PERIODS, seeded)
        for n, bounds in _past_periods(r)
    ]
    written = 0
    if past:
        written = await execute(
            conn,
            _PAST_INVOICES,
            {
                "subscription_ids": int_array(r["id"] for r, _, _ in past),
                "customer_ids": int_array(r["customer_id"] for r, _, _ in past),
                "period_indexes": int_array(n for _, n, _ in past),
                "starts": instant_array(bounds.start for _, _, bounds in past),
                "ends": instant_array(bounds.end for _, _, bounds in past),
                "prices": int_array(r["price_amount"] for r, _, _ in past),
                "currencies": text_array(r["currency"] for r, _, _ in past),
            },
        )
    credit = await execute(conn, _CREDIT, seeded)
    return HistoryReport(invoices=current + written, credit_entries=credit)


def _past_periods(r: Mapping[str, Any]) -> list[tuple[int, period_rules.Period]]:
    interval = period_rules.Interval(r["billing_interval"])
    return [
        (n, period_rules.period_bounds(r["billing_anchor"], interval, n, r["time_zone"]))
        for n in range(r["period_index"])
    ]
