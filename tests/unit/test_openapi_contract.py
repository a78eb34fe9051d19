"""The checked-in OpenAPI document (docs/openapi.json) is what the API serves, errors are
problem+json only, every operation documents its 500 and every request body has examples."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from services.api import schemas
from services.api.openapi import OPENAPI_PATH, normalise
from services.api.problems import PROBLEM_JSON
from services.ops.contracts import artifacts

ROOT = Path(__file__).resolve().parents[2]
DOC: dict[str, Any] = json.loads((ROOT / OPENAPI_PATH).read_text())
OPERATIONS = [
    (method, path, op) for path, item in DOC["paths"].items() for method, op in item.items()
]
REQUEST_MODELS: dict[str, type[BaseModel]] = {
    "/subscriptions": schemas.CreateSubscriptionRequest,
    "/subscriptions/{id}/cancel": schemas.CancelRequest,
    "/subscriptions/{id}/change-plan": schemas.ChangePlanRequest,
    "/subscriptions/{id}/end-trial": schemas.EndTrialRequest,
    "/subscriptions/{id}/resume-renewal": schemas.ResumeRenewalRequest,
    "/subscriptions/{id}/pause": schemas.PauseRequest,
    "/subscriptions/{id}/resume": schemas.ResumeRequest,
    "/webhooks/payments": schemas.WebhookEvent,
    "/customers/{customerId}/payment-method": schemas.PaymentMethodRequest,
    "/customers": schemas.CreateCustomerRequest,
    "/webhooks/stripe": schemas.StripeEventBody,
    "/api-keys": schemas.CreateApiKeyRequest,
    "/api-keys/{prefix}/rotate": schemas.RotateApiKeyRequest,
    "/subscriptions/{id}/tax-location": schemas.TaxLocationRequest,
    "/coupons": schemas.CreateCouponRequest,
    "/subscriptions/{id}/coupon": schemas.ApplyCouponRequest,
}


def test_the_checked_in_document_is_what_the_api_serves() -> None:
    generated = artifacts.openapi_artifact()[OPENAPI_PATH]
    assert (ROOT / OPENAPI_PATH).read_text() == generated


def test_a_changed_response_field_makes_the_drift_check_fail() -> None:
    changed = json.loads(artifacts.openapi_artifact()[OPENAPI_PATH])
    changed["components"]["schemas"]["SubscriptionOut"]["properties"].pop("status")
    stale = artifacts.differences(ROOT, {OPENAPI_PATH: artifacts.dump_json(changed)})
    assert stale == [OPENAPI_PATH]


@pytest.mark.parametrize(("method", "path", "op"), OPERATIONS, ids=lambda v: str(v)[:40])
def test_error_answers_are_problem_json_only_and_500_is_documented(
    method: str, path: str, op: dict[str, Any]
) -> None:
    responses = op["responses"]
    assert "500" in responses
    for status, response in responses.items():
        if status[0] in "45":
            assert list(response["content"]) == [PROBLEM_JSON], (method, path, status)
            schema = response["content"][PROBLEM_JSON]["schema"]
            assert schema == {"$ref": "#/components/schemas/Problem"}


def test_fastapi_validation_schemas_are_not_published() -> None:
    assert "HTTPValidationError" not in DOC["components"]["schemas"]
    assert "Problem" in DOC["components"]["schemas"]


def test_every_request_body_has_examples_the_api_accepts() -> None:
    bodies = {path: op["requestBody"] for _, path, op in OPERATIONS if "requestBody" in op}
    assert sorted(bodies) == sorted(REQUEST_MODELS)
    for path, body in bodies.items():
        examples = body["content"]["application/json"]["examples"]
        assert examples
        for example in examples.values():
            REQUEST_MODELS[path].model_validate(example["value"])


def test_normalise_turns_a_json_error_into_a_problem_and_adds_the_500() -> None:
    doc = {
        "paths": {
            "/x": {
                "get": {
                    "responses": {
                        "200": {"content": {"application/json": {}}},
                        "422": {"content": {"application/json": {"schema": {}}}},
                    }
                }
            }
        },
        "components": {"schemas": {"HTTPValidationError": {}}},
    }
    responses = normalise(doc)["paths"]["/x"]["get"]["responses"]
    assert list(responses["422"]["content"]) == [PROBLEM_JSON]
    assert list(responses["500"]["content"]) == [PROBLEM_JSON]
    assert list(responses["200"]["content"]) == ["application/json"]
