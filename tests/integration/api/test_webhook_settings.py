"""Which webhook routes the API serves, and the secrets it refuses to start with."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from pydantic import SecretStr
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.clock import ManualClock
from services.api.app import UnsafeSettings, create_app
from services.api.settings import ApiSettings
from services.api.signatures import sign_header
from tests.integration.api.conftest import ROOT, SECRETS, asgi_client
from tests.integration.api.helpers import assert_problem
from tests.support.processes import free_port


def changed(settings: ApiSettings, changes: dict[str, str]) -> ApiSettings:
    return settings.model_copy(
        update={k: SecretStr(v) if k.endswith("secrets") else v for k, v in changes.items()}
    )


async def test_the_simulators_route_is_served_only_where_the_simulator_is_the_gateway(
    api_settings: ApiSettings, clock: ManualClock, engine: AsyncEngine
) -> None:
    on_stripe = create_app(changed(api_settings, {"gateway": "stripe"}), clock)
    assert "/webhooks/payments" not in on_stripe.openapi()["paths"]
    assert "/webhooks/stripe" in on_stripe.openapi()["paths"]
    body = json.dumps({"id": "evt_1", "type": "charge.succeeded"}).encode()
    signed = sign_header(SECRETS[0].encode(), int(clock.now().timestamp()), body)
    async with on_stripe.router.lifespan_context(on_stripe), asgi_client(on_stripe, None) as c:
        answer = await c.post(
            "/webhooks/payments",
            content=body,
            headers={"content-type": "application/json", "Billing-Signature": signed},
        )
    assert_problem(answer, 404, "not-found")
    on_simulator = create_app(api_settings, clock)
    assert "/webhooks/payments" in on_simulator.openapi()["paths"]


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"webhook_secrets": ""}, "BILLING_WEBHOOK_SECRETS is empty"),
        (
            {"webhook_secrets": "whsec_new, CHANGE-ME"},
            "BILLING_WEBHOOK_SECRETS holds a placeholder",
        ),
        ({"webhook_secrets": "dev-webhook-secret"}, "BILLING_WEBHOOK_SECRETS holds a development"),
        (
            {"gateway": "stripe", "stripe_webhook_secrets": ""},
            "BILLING_STRIPE_WEBHOOK_SECRETS is empty",
        ),
        (  # the Stripe route is served with either gateway: its secret is checked too
            {"stripe_webhook_secrets": "change-me"},
            "BILLING_STRIPE_WEBHOOK_SECRETS holds a placeholder",
        ),
        (
            {"profile": "development", "webhook_secrets": "CHANGE-ME"},
            "BILLING_WEBHOOK_SECRETS holds a placeholder",
        ),
    ],
)
async def test_the_api_refuses_to_start_with_a_missing_placeholder_or_development_secret(
    api_settings: ApiSettings,
    clock: ManualClock,
    engine: AsyncEngine,
    changes: dict[str, str],
    reason: str,
) -> None:
    with pytest.raises(UnsafeSettings) as refused:
        create_app(changed(api_settings, changes), clock)
    assert str(refused.value).startswith(reason)
    assert "; " not in str(refused.value)  # the one reason
    assert "dev-webhook-secret" not in str(refused.value)  # names the setting, not the secret


async def test_the_development_profile_keeps_its_development_secret(
    api_settings: ApiSettings, clock: ManualClock, engine: AsyncEngine
) -> None:
    development = {"profile": "development", "webhook_secrets": "dev-webhook-secret"}
    app = create_app(changed(api_settings, development), clock)
    async with app.router.lifespan_context(app), asgi_client(app, None) as c:
        assert (await c.get("/healthz")).status_code == 200


def test_the_api_process_exits_rather_than_serve_a_placeholder_secret(database_url: str) -> None:
    env = {
        **os.environ,
        "BILLING_WEBHOOK_SECRETS": "CHANGE-ME",
        "BILLING_API_PORT": str(free_port()),
        "BILLING_API_INTERNAL_PORT": "0",
    }
    exited = subprocess.run(
        [sys.executable, "-m", "services.api"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert exited.returncode == 2
    assert "api_refused_to_start" in exited.stdout + exited.stderr
    assert "Traceback" not in exited.stdout + exited.stderr
    assert "BILLING_WEBHOOK_SECRETS holds a placeholder" in exited.stdout + exited.stderr
