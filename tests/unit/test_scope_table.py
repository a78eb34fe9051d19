"""docs/API.md's scope table is generated from the scopes the routes declare (``make
contracts``): it lists every operation under the one scope it needs, and a test fails when the
checked-in table differs from the routes."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from billing_core.domain.scopes import DESCRIPTIONS, Scope
from services.api.auth import SCHEME_NAME
from services.ops.contracts import artifacts, scope_table

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    return artifacts.api_document()


def test_the_checked_in_scope_table_is_what_the_routes_declare(document: dict[str, Any]) -> None:
    generated = artifacts.scope_table_artifact(ROOT, document)
    assert artifacts.differences(ROOT, generated) == []


def test_every_operation_with_a_key_is_in_the_table_under_its_scope(
    document: dict[str, Any],
) -> None:
    table = scope_table.render(document, SCHEME_NAME)
    rows = {line.split(" | ")[0].strip("| `"): line for line in table.splitlines()[2:]}
    assert list(rows) == [str(s) for s in Scope]
    for path, item in document["paths"].items():
        for method, operation in item.items():
            for requirement in operation.get("security", []):
                (scope,) = requirement[SCHEME_NAME]
                assert f"`{method.upper()} {path}`" in rows[scope], (method, path)
    assert "`PUT /subscriptions/{id}/tax-location`" in rows["subscriptions:write"]
    assert "`POST /coupons`" in rows["admin"]


def test_a_route_declaring_another_scope_changes_the_table(document: dict[str, Any]) -> None:
    changed = copy.deepcopy(document)
    changed["paths"]["/plans"]["get"]["security"] = [{SCHEME_NAME: ["invoices:read"]}]
    table = scope_table.render(changed, SCHEME_NAME)
    rows = {line.split(" | ")[0].strip("| `"): line for line in table.splitlines()[2:]}
    assert "`GET /plans`" in rows["invoices:read"]
    assert "`GET /plans`" not in rows["plans:read"]
    stale = artifacts.differences(ROOT, artifacts.scope_table_artifact(ROOT, changed))
    assert stale == [scope_table.API_DOC_PATH]


def test_every_scope_is_described() -> None:
    assert set(DESCRIPTIONS) == set(Scope)
    assert all(DESCRIPTIONS.values())
