"""Set where a subscription's invoices are taxed (``subscription_tax_location``)."""

from __future__ import annotations

from datetime import datetime

from billing_core.db.pg import Connection
from billing_core.domain.tax import TaxLocation, TaxRate
from billing_core.repo import audit
from billing_core.repo import subscriptions as subscriptions_repo
from billing_core.repo import tax as tax_repo
from billing_core.usecases.lifecycle import Decision, Outcome, change_subscription

Rate = TaxRate | None


async def set_tax_location(
    conn: Connection,
    *,
    subscription_id: int,
    location: TaxLocation,
    now: datetime,
    actor: audit.Actor | None = None,
) -> TaxRate | None:
    """Tax the invoices issued from now on at ``location``'s rate; that rate (``None``: the
    location has none)."""

    async def decide(sub: subscriptions_repo.Subscription, now: datetime) -> Decision[Rate]:
        async def locate(_version: int, _decided: Outcome[Rate]) -> Outcome[Rate]:
            await tax_repo.set_location(conn, sub.id, location, now=now)
            rate = (await tax_repo.rates_for(conn, [sub.id])).get(sub.id)
            detail = {
                "country": location.country,
                "region": location.region,
                "taxRate": rate.label if rate else None,
            }
            return Outcome(rate, (), detail)

        return Decision(Outcome(None), {}, locate)

    return await change_subscription(
        conn,
        decide,
        subscription_id=subscription_id,
        action=audit.SUBSCRIPTION_SET_TAX_LOCATION,
        now=now,
        actor=actor,
    )
