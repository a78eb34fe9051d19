"""The bulk seeder writes periods the renewer continues exactly; the claim uses idx_sub_due."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import asyncpg
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.domain import period as period_rules
from billing_core.invariants.amounts import check_amounts
from billing_core.invariants.lines import check_lines
from billing_core.repo import renewal as renewal_repo
from billing_core.seeding import SeedSpec, seed_filler_sql, seed_subscriptions, seed_tax_mix
from billing_core.usecases.renew import renew_due_batch

NOW = datetime(2025, 6, 1, 0, 0, tzinfo=UTC)


async def _check_periods(pg: asyncpg.Connection, where: str = "true") -> int:
    rows = await pg.fetch(
        "SELECT s.time_zone, s.billing_anchor, s.period_index, s.current_period_start, "
        f"s.current_period_end, p.billing_interval FROM subscription s JOIN plan p "
        f"ON p.id = s.plan_id WHERE {where}"
    )
    for r in rows:
        expected = period_rules.period_bounds(
            r["billing_anchor"],
            period_rules.Interval(r["billing_interval"]),
            r["period_index"],
            r["time_zone"],
        )
        assert (r["current_period_start"], r["current_period_end"]) == (
            expected.start,
            expected.end,
        ), dict(r)
    return len(rows)


async def test_seeded_subscriptions_are_spread_over_the_window_with_domain_periods(
    engine: AsyncEngine, pg: asyncpg.Connection
) -> None:
    progress: list[tuple[int, int]] = []
    report = await seed_subscriptions(
        pg,
        SeedSpec(count=5000, due_from=NOW, due_window=timedelta(hours=24), chunk_size=1000),
        progress=lambda done, total: progress.append((done, total)),
    )

    assert report.inserted == 5000
    assert progress[0] == (0, 5000) and progress[-1] == (5000, 5000) and len(progress) == 6
    assert await _check_periods(pg) == 5000
    stats = await pg.fetchrow(
        "SELECT min(current_period_end) AS lo, max(current_period_end) AS hi, "
        "count(DISTINCT time_zone) AS zones, count(DISTINCT plan_id) AS plans, "
        "count(DISTINCT customer_id) AS customers, "
        "count(*) FILTER (WHERE current_period_end < $1::timestamptz + interval '12 hours') "
        "AS first_half "
        "FROM subscription",
        NOW,
    )
    # Spread over the 24 h (an hour of slack for wall times that fall in a DST gap).
    assert NOW - timedelta(hours=1) <= stats["lo"] < NOW + timedelta(hours=1)
    assert NOW + timedelta(hours=23) <= stats["hi"] <= NOW + timedelta(hours=25)
    assert 2000 < stats["first_half"] < 3000
    assert stats["zones"] >= 8 and stats["plans"] >= 5 and stats["customers"] == 5000
    dst_zones = {"Europe/Paris", "America/New_York", "Australia/Sydney"}
    assert dst_zones <= {
        r[0] for r in await pg.fetch("SELECT DISTINCT time_zone FROM subscription")
    }


async def test_demo_seed_is_due_within_minutes(pg: asyncpg.Connection) -> None:
    report = await seed_subscriptions(
        pg,
        SeedSpec(
            count=300,
            due_from=NOW,
            due_window=timedelta(minutes=3),
            time_zones=("UTC", "Asia/Tokyo", "Europe/Paris"),
            credit_share=0.2,
            cancel_share=0.1,
        ),
    )
    assert report.first_due is not None and report.last_due is not None
    assert NOW <= report.first_due and report.last_due < NOW + timedelta(minutes=3)
    assert await pg.fetchval("SELECT count(*) FROM subscription WHERE credit_balance > 0") > 20
    assert await pg.fetchval("SELECT count(*) FROM subscription WHERE cancel_at_period_end") > 10


async def test_sql_filler_rows_follow_the_domain_periods(pg: asyncpg.Connection) -> None:
    inserted = await seed_filler_sql(
        pg, count=2000, due_from=NOW + timedelta(days=3), due_window=timedelta(days=20)
    )
    assert inserted == 2000
    assert await _check_periods(pg) == 2000
    lo, hi = await pg.fetchrow(
        "SELECT min(current_period_end), max(current_period_end) FROM subscription"
    )
    assert NOW + timedelta(days=3) <= lo and hi <= NOW + timedelta(days=23)


async def test_seeded_subscriptions_each_have_their_customer_created_first(
    pg: asyncpg.Connection,
) -> None:
    """Both seeders create their subscriptions' customers (set-based), with an address when
    a domain is given; customers created afterwards get ids past the seeded ones."""
    await seed_subscriptions(
        pg,
        SeedSpec(
            count=50,
            due_from=NOW,
            due_window=timedelta(hours=1),
            first_customer_id=1000,
            email_domain="example.test",
        ),
    )
    await seed_filler_sql(
        pg, count=30, due_from=NOW, due_window=timedelta(days=1), first_customer_id=2000
    )
    customers = await pg.fetch(
        "SELECT c.id, c.external_id, c.email FROM subscription s "
        "JOIN customer c ON c.id = s.customer_id ORDER BY c.id"
    )
    assert [r["id"] for r in customers] == [*range(1000, 1050), *range(2000, 2030)]
    assert all(r["external_id"] == str(r["id"]) for r in customers)
    assert [r["email"] for r in customers[:2]] == [
        "customer-1000@example.test",
        "customer-1001@example.test",
    ]
    assert all(r["email"] is None for r in customers[50:])
    assert await pg.fetchval("SELECT count(*) FROM customer") == 80
    created = await pg.fetchval("INSERT INTO customer (external_id) VALUES ('crm-1') RETURNING id")
    assert created == 2030


def test_place_handles_month_end_and_dst_gaps() -> None:
    from billing_core.seeding import place  # noqa: PLC0415

    # Mar 31 does not exist one month earlier: the seeder goes back whole years instead.
    due = datetime(2025, 3, 31, 8, 0, tzinfo=UTC)
    anchor, index, current = place(due, "UTC", period_rules.Interval.MONTH, 0)
    assert current.end == due and index == 11 and anchor == datetime(2024, 3, 31, 8, tzinfo=UTC)
    # 02:30 local exists on Apr 15 but not on Mar 30 (spring forward in Paris).
    paris = ZoneInfo("Europe/Paris")
    due = datetime(2025, 4, 30, 2, 30, tzinfo=paris).astimezone(UTC)
    anchor, index, current = place(due, "Europe/Paris", period_rules.Interval.MONTH, 0)
    assert current.end == due
    assert current == period_rules.period_bounds(
        anchor, period_rules.Interval.MONTH, index, "Europe/Paris"
    )


async def test_claim_uses_the_partial_due_index(
    engine: AsyncEngine, pg: asyncpg.Connection
) -> None:
    await seed_filler_sql(
        pg, count=30_000, due_from=NOW + timedelta(days=1), due_window=timedelta(days=25)
    )
    await seed_subscriptions(
        pg, SeedSpec(count=200, due_from=NOW - timedelta(hours=1), due_window=timedelta(minutes=30))
    )
    await pg.execute("ANALYZE subscription")

    plan = await renewal_repo.explain_claim(pg, now=NOW, limit=1000)
    assert await renewal_repo.count_due(pg, now=NOW) == 200

    assert "idx_sub_due" in plan, plan
    assert "Seq Scan on subscription" not in plan, plan
    assert "LockRows" in plan


async def test_the_seeded_tax_mix_renews_with_tax_lines_that_add_up(
    pg: asyncpg.Connection,
) -> None:
    now = datetime(2026, 3, 10, tzinfo=UTC)
    await seed_subscriptions(
        pg, SeedSpec(count=400, due_from=now - timedelta(hours=2), due_window=timedelta(hours=1))
    )
    located = await seed_tax_mix(pg, share=0.5)
    assert 120 < located < 280
    assert await seed_tax_mix(pg, share=0.5) == 0  # a second run adds nothing

    async with pg.transaction():
        result = await renew_due_batch(pg, now=now, batch_size=1000)
    kinds = dict(
        tuple(row)
        for row in await pg.fetch(
            "SELECT coalesce(tax_inclusive::text, 'none'), count(*) "
            "FROM invoice_line WHERE kind = 'TAX' GROUP BY 1"
        )
    )
    assert (await check_lines(pg)).ok
    assert (await check_amounts(pg)).ok
    assert result.claimed == 400
    assert kinds.get("true", 0) > 0 and kinds.get("false", 0) > 0  # VAT inside, sales tax on top
