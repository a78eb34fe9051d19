"""Plan changes around a trial's end. During the trial the plan is swapped and nothing is
charged; once the trial is over (even before the renewer has run) period 0 is the old plan's,
from the trial's end, and the change falls in it: caught up first, as for any period end."""

from __future__ import annotations

from datetime import timedelta

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.clock import ManualClock
from billing_core.db import pg
from tests.integration.api.helpers import subscribe
from tests.integration.lifecycle.helpers import assert_clean, change, renew, renewals


@pytest.mark.parametrize(
    "plans",
    [
        ["BUSINESS_MONTHLY"],
        ["PRO_YEARLY"],
        ["PRO_YEARLY", "BUSINESS_MONTHLY"],
        ["BUSINESS_MONTHLY", "PRO_YEARLY"],
    ],
)
async def test_changes_during_a_trial_price_period_0_at_the_last_plan(
    client: httpx.AsyncClient,
    engine: AsyncEngine,
    pool: pg.Pool,
    clock: ManualClock,
    plans: list[str],
) -> None:
    trial_end = clock.now() + timedelta(days=3)
    sub = await subscribe(client, plan="PRO_MONTHLY", trialEnd=trial_end.isoformat())
    for plan in plans:
        clock.advance(timedelta(hours=5))
        await change(client, sub, plan)
    clock.set(trial_end + timedelta(hours=1))
    await renew(engine, clock)
    prices = {"BUSINESS_MONTHLY": 9990, "PRO_YEARLY": 29900}
    assert [r["subtotal"] for r in await renewals(engine, sub["id"])] == [prices[plans[-1]]]
    await assert_clean(pool, clock)


@pytest.mark.parametrize("plan", ["BUSINESS_MONTHLY", "PRO_YEARLY", "BASIC_MONTHLY"])
async def test_a_change_after_the_trial_end_before_the_renewer_falls_in_period_0(
    client: httpx.AsyncClient, engine: AsyncEngine, pool: pg.Pool, clock: ManualClock, plan: str
) -> None:
    trial_end = clock.now() + timedelta(days=3)
    sub = await subscribe(client, plan="PRO_MONTHLY", trialEnd=trial_end.isoformat())
    clock.set(trial_end + timedelta(seconds=1))
    await change(client, sub, plan)
    clock.advance(timedelta(seconds=5))
    await renew(engine, clock)
    # Period 0 at the old plan from the trial's end (the change caught it up), then the change.
    assert (await renewals(engine, sub["id"]))[0]["subtotal"] == 2990
    await assert_clean(pool, clock)
