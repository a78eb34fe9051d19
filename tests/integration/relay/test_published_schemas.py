"""A consumer's view of the contract: records read back from real Kafka validate against the
published JSON Schemas (found by their ``ce_dataschema``) with a general JSON Schema validator,
and their headers against the AsyncAPI document."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core import cloudevents
from billing_core.db import pg
from billing_core.domain.events import DomainEvent
from billing_core.repo.outbox import append_events
from billing_core.settings import CoreSettings
from tests.integration.relay.conftest import RelayFactory, drain
from tests.integration.relay.helpers import ROOT, consume, create_subscriptions
from tests.unit.test_events import ALL


def published_schemas() -> dict[str, dict[str, Any]]:
    """The checked-in schemas by their ``$id``, as a consumer would download them."""
    found = {}
    for path in sorted((ROOT / "docs/schemas/events").glob("*.json")):
        schema = json.loads(Path(path).read_text())
        found[schema["$id"]] = schema
    return found


async def test_every_event_type_read_from_kafka_validates_against_its_published_schema(
    pool: pg.Pool,
    engine: AsyncEngine,
    make_relay: RelayFactory,
    settings: CoreSettings,
    kafka_topic: str,
) -> None:
    (sub,) = await create_subscriptions(engine, 1)
    events = [DomainEvent(e.data.model_copy(update={"subscriptionId": sub})) for e in ALL]
    async with pg.transaction(pool) as conn:
        await append_events(conn, events, datetime(2026, 12, 1, tzinfo=UTC))
    async with make_relay() as relay:
        await drain(relay)
    consumed = await consume(
        settings.kafka_bootstrap, kafka_topic, expected=len(events), timeout=30
    )

    schemas = published_schemas()
    messages = yaml.safe_load((ROOT / "docs/asyncapi.yaml").read_text())["components"]["messages"]
    seen = []
    for record in consumed.records:
        headers = {name: value.decode() for name, value in record.headers}
        schema = schemas[headers["ce_dataschema"]]
        jsonschema.Draft202012Validator.check_schema(schema)
        jsonschema.Draft202012Validator(schema).validate(json.loads(record.value))
        event = cloudevents.decode(record.key, record.value, record.headers)
        message = messages[f"{event.event_type}.v{event.schema_version}"]
        jsonschema.validate(headers, message["headers"])
        jsonschema.validate(record.key.decode(), message["bindings"]["kafka"]["key"])
        seen.append((event.event_type, event.sequence))
    assert seen == [(str(e.type), n) for n, e in enumerate(events, start=1)]


def test_a_payload_off_its_schema_is_rejected_by_the_validator() -> None:
    """The validation above can fail: the old snake_case shape of InvoicePaid does not pass."""
    schema = published_schemas()[cloudevents.schema_uri("InvoicePaid", 1)]
    old_shape = {"customer_id": 1, "invoice_id": 2, "amount": 990, "currency": "EUR"}
    errors = list(jsonschema.Draft202012Validator(schema).iter_errors(old_shape))
    assert {e.validator for e in errors} == {"required"}
