"""BILLING_GATEWAY picks the collector's adapter; Stripe without a key is an invalid setting."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from services.collector.settings import CollectorSettings


def test_simulator_is_the_default_and_stripe_needs_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BILLING_GATEWAY", raising=False)
    monkeypatch.delenv("BILLING_STRIPE_API_KEY", raising=False)
    assert CollectorSettings().gateway == "simulator"
    with pytest.raises(ValidationError, match="BILLING_STRIPE_API_KEY"):
        CollectorSettings(gateway="stripe")
    monkeypatch.setenv("BILLING_GATEWAY", "stripe")
    monkeypatch.setenv("BILLING_STRIPE_API_KEY", "rk_test_123")
    settings = CollectorSettings()
    assert (settings.gateway, settings.stripe_api_key.get_secret_value()) == (
        "stripe",
        "rk_test_123",
    )
    monkeypatch.setenv("BILLING_GATEWAY", "paypal")
    with pytest.raises(ValidationError):
        CollectorSettings()
