"""The event contract: one model per type and version, the checked-in schemas, AsyncAPI
document and docs/EVENTS.md are what the models generate, and a changed field is caught."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from pathlib import Path

import jsonschema
import pytest
import yaml

from billing_core import cloudevents
from billing_core.domain import event_payloads as p
from billing_core.domain.events import DomainEvent, EventType
from services.ops.contracts import artifacts, asyncapi, envelope, events_doc
from services.ops.contracts.event_schemas import schema_path
from tests.unit.test_events import ALL

ROOT = Path(__file__).resolve().parents[2]


def checked_in_schema(model: type[p.EventPayload]) -> dict[str, object]:
    loaded: dict[str, object] = json.loads((ROOT / schema_path(model)).read_text())
    return loaded


def test_one_model_per_event_type_and_version() -> None:
    keys = [(m.event_type, m.version) for m in p.PAYLOAD_MODELS]
    assert len(keys) == len(set(keys))
    assert sorted(t for t, _ in keys) == sorted(t.value for t in EventType)
    assert {m.event_type: p.payload_model(m.event_type, 1) for m in p.PAYLOAD_MODELS} == {
        m.event_type: m for m in p.PAYLOAD_MODELS
    }


@pytest.mark.parametrize("event", ALL, ids=lambda e: str(e.type))
def test_every_built_payload_validates_against_its_checked_in_schema(event: DomainEvent) -> None:
    schema = checked_in_schema(type(event.data))
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    validator.validate(json.loads(event.payload_json()))
    assert schema["$id"] == cloudevents.schema_uri(str(event.type), event.version)


def test_a_payload_is_built_only_through_its_model() -> None:
    with pytest.raises(ValueError, match="extra"):
        p.InvoicePaidV1(
            subscriptionId=1,
            invoiceId=2,
            amount=3,
            currency="USD",
            paidAt=datetime(2026, 1, 1, tzinfo=UTC),
            customer_id=4,  # type: ignore[call-arg]
        )
    with pytest.raises(ValueError, match="customer_request"):
        p.SubscriptionCanceledV1(
            subscriptionId=1, reason="customer", canceledAt=datetime(2026, 1, 1, tzinfo=UTC)
        )


def test_a_consumer_reads_a_payload_back_ignoring_fields_added_later() -> None:
    event = ALL[6]  # InvoicePaid
    data = json.dumps({**event.payload, "addedLater": True})
    assert p.parse_payload("InvoicePaid", 1, data) == event.data


def test_the_checked_in_contract_files_are_what_the_code_generates() -> None:
    assert artifacts.differences(ROOT, artifacts.all_artifacts(ROOT)) == []


class ChangedInvoicePaid(p.InvoicePaidV1):
    """The gateway confirmed a charge for the invoice, or credit covered all of it."""

    amount: str  # type: ignore[assignment]  # the deliberate change: an int became a string


def test_a_changed_payload_field_makes_the_drift_check_fail() -> None:
    models = [ChangedInvoicePaid if m is p.InvoicePaidV1 else m for m in p.PAYLOAD_MODELS]
    stale = artifacts.differences(ROOT, artifacts.event_artifacts(models))
    assert stale == sorted(
        ["docs/EVENTS.md", "docs/asyncapi.yaml", "docs/schemas/events/InvoicePaid.v1.json"]
    )


def test_the_asyncapi_document_describes_every_message_with_its_headers() -> None:
    doc = yaml.safe_load((ROOT / asyncapi.ASYNCAPI_PATH).read_text())
    assert doc["asyncapi"].startswith("3.")
    messages = doc["components"]["messages"]
    assert sorted(messages) == sorted(f"{m.event_type}.v{m.version}" for m in p.PAYLOAD_MODELS)
    for model in p.PAYLOAD_MODELS:
        message = messages[asyncapi.message_id(model)]
        headers = cloudevents.encode_headers(
            event_id=uuid.uuid4(),
            event_type=model.event_type,
            occurred_at=datetime(2026, 12, 1, tzinfo=UTC),
            subscription_id=42,
            sequence=7,
            schema_version=model.version,
        )
        jsonschema.validate({k: v.decode() for k, v in headers}, message["headers"])
        assert message["bindings"]["kafka"]["key"] == envelope.KEY_SCHEMA


def test_the_sequence_header_sorts_as_a_string_like_the_number() -> None:
    numbers = [1, 2, 9, 10, 99, 100, 12345678901]
    texts = [cloudevents.format_sequence(n) for n in numbers]
    assert sorted(texts) == texts
    assert [int(t) for t in texts] == numbers


def test_a_schema_file_nothing_generates_is_reported_and_removed(tmp_path: Path) -> None:
    files = artifacts.event_artifacts()
    artifacts.write(tmp_path, files)
    assert artifacts.differences(tmp_path, files) == []
    orphan = tmp_path / "docs/schemas/events/InvoiceSent.v1.json"
    orphan.write_text("{}")
    assert artifacts.differences(tmp_path, files) == ["docs/schemas/events/InvoiceSent.v1.json"]
    artifacts.write(tmp_path, files)
    assert not orphan.exists()


def test_the_events_page_has_one_row_per_payload_field_with_its_description() -> None:
    page = events_doc.render()
    for model in p.PAYLOAD_MODELS:
        heading = f"### [{model.event_type} v{model.version}]"
        section = page.split(heading, 1)[1].split("\n#", 1)[0]
        for name, field in model.model_fields.items():
            rows = [r for r in section.splitlines() if r.startswith(f"| `{name}` |")]
            if name == events_doc.SHARED_FIELD:
                assert rows == []
                continue
            assert len(rows) == 1, (model.event_type, name)
            assert " ".join((field.description or "").split()) in rows[0].replace("\\|", "|")
            assert ("*optional*" in rows[0]) == (not field.is_required())
