"""Property-based tests generated from the API's own OpenAPI schema (schemathesis).

Every operation is called, authenticated, against the API running under uvicorn; the checks
are: no 5xx, a documented status code, a documented content type and headers, and a body that
conforms to the documented schema. Settings: ``MAX_EXAMPLES`` examples per operation (kept
modest so the module runs in well under a minute), no deadline (shared CI machines), derandomized
so a failure reproduces.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from billing_core.clock import SystemClock
from billing_core.settings import CoreSettings
from services.api.admin import create_api_key
from services.api.app import create_app
from services.api.settings import ApiSettings
from tests.integration.api.conftest import (
    SECRETS,
    STRIPE_SECRETS,
    ApiServer,
    start_api_server,
    stop_api_server,
)

MAX_EXAMPLES = 25
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


@pytest.fixture(scope="module")
def st_server(database_url: str) -> Iterator[ApiServer]:
    server = start_api_server()
    try:
        yield server
    finally:
        stop_api_server(server)


@pytest.fixture(scope="module")
def st_api_key(settings: CoreSettings) -> str:
    return create_api_key(settings, "schemathesis")


# The schema the application itself generates (building it needs no database); the test below
# checks that the running server serves exactly this document.
OPENAPI = create_app(
    ApiSettings(webhook_secrets=",".join(SECRETS), stripe_webhook_secrets=",".join(STRIPE_SECRETS)),
    SystemClock(),
).openapi()
schema = schemathesis.openapi.from_dict(OPENAPI)


def test_served_schema_is_the_one_tested(st_server: ApiServer) -> None:
    assert httpx.get(f"{st_server.internal_url}/openapi.json").json() == OPENAPI


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
def test_every_operation_conforms(
    case: schemathesis.Case[Any], st_server: ApiServer, st_api_key: str
) -> None:
    case.call_and_validate(
        base_url=st_server.base_url,
        headers={"Authorization": f"Bearer {st_api_key}"},
        checks=CHECKS,
    )
