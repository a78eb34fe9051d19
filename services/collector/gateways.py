"""The payment gateway the collector charges, chosen by ``BILLING_GATEWAY``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta

from billing_core.db.pg import LazyPool
from billing_core.gateway import HttpPaymentGateway, PaymentGateway
from billing_core.repo import gateway_customers
from billing_core.stripe_gateway import StripeCustomer, StripePaymentGateway
from services.collector.settings import CollectorSettings


def build_gateway(
    settings: CollectorSettings, pool: LazyPool
) -> tuple[PaymentGateway, Callable[[], Awaitable[None]], str]:
    """The gateway, how to close it, and where it is (for the start-up log line)."""
    if settings.gateway == "stripe":
        stripe = StripePaymentGateway(
            settings.stripe_api_key.get_secret_value(),
            customers=stripe_customers(pool),
            api_base=settings.stripe_api_base,
            max_connections=settings.collector_max_in_flight,
            connect_timeout=settings.collector_connect_timeout_seconds,
            read_timeout=settings.collector_read_timeout_seconds,
            search_lag=timedelta(seconds=settings.stripe_search_lag_seconds),
        )
        return stripe, stripe.aclose, f"stripe {settings.stripe_api_base}"
    simulator = HttpPaymentGateway(
        settings.collector_gateway_url,
        max_connections=settings.collector_max_in_flight,
        connect_timeout=settings.collector_connect_timeout_seconds,
        read_timeout=settings.collector_read_timeout_seconds,
    )
    return simulator, simulator.aclose, settings.collector_gateway_url


def stripe_customers(pool: LazyPool) -> Callable[[int], Awaitable[StripeCustomer | None]]:
    """Reads the customer's Stripe customer and default payment method (``gateway_customer``)
    just before the charge, so a card changed through the API is the one charged."""

    async def lookup(customer_id: int) -> StripeCustomer | None:
        async with (await pool.get()).acquire() as conn:
            found = await gateway_customers.get(conn, customer_id)
        if found is None or found.gateway != "stripe":
            return None
        return StripeCustomer(found.gateway_customer_id, found.payment_method_id)

    return lookup
