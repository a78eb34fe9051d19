"""The Kafka record around every payload (CloudEvents 1.0, Kafka binding, binary mode), as the
codec ``billing_core.cloudevents`` writes it: one description for docs/EVENTS.md and AsyncAPI."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from billing_core import cloudevents as ce
from billing_core.domain.event_payloads import EventPayload

UUID = {"type": "string", "format": "uuid"}
DECIMAL_ID = {"type": "string", "pattern": "^[1-9][0-9]*$"}


@dataclass(frozen=True)
class Header:
    name: str
    doc: str
    schema: dict[str, Any] = field(default_factory=lambda: {"type": "string"})


def headers(model: type[EventPayload] | None = None) -> list[Header]:
    """The headers of a record; with ``model``, the values fixed by its type and version."""
    type_value = ce.ce_type(model.event_type) if model else None
    schema_value = ce.schema_uri(model.event_type, model.version) if model else None
    version_value = str(model.version) if model else None

    def fixed(value: str | None, otherwise: dict[str, Any]) -> dict[str, Any]:
        return {"type": "string", "const": value} if value is not None else otherwise

    return [
        Header(ce.H_SPECVERSION, "`1.0`", {"type": "string", "const": ce.SPEC_VERSION}),
        Header(
            ce.H_ID,
            "the event id, a UUID, unique per event (the outbox `event_id`); "
            "the de-duplication key",
            UUID,
        ),
        Header(
            ce.H_TYPE,
            "`billing.<EventType>`, e.g. `billing.InvoicePaid`",
            fixed(type_value, {"type": "string", "pattern": "^billing\\.[A-Za-z]+$"}),
        ),
        Header(ce.H_SOURCE, f"`{ce.DEFAULT_SOURCE}` (setting `BILLING_RELAY_SOURCE`)"),
        Header(ce.H_SUBJECT, "the subscription id (same as the key)", DECIMAL_ID),
        Header(
            ce.H_TIME,
            "when the state change happened (`occurred_at`), RFC 3339 in UTC with "
            "microseconds: `2026-12-03T10:00:00.123456Z`",
            {"type": "string", "format": "date-time"},
        ),
        Header(
            ce.H_DATASCHEMA,
            "the URI of the payload's JSON Schema (its `$id`), e.g. "
            f"`{ce.schema_uri('InvoicePaid', 1)}` for `docs/schemas/events/InvoicePaid.v1.json`",
            fixed(schema_value, {"type": "string", "format": "uri"}),
        ),
        Header(
            ce.H_CONTENT_TYPE,
            f"`{ce.CONTENT_TYPE}`",
            {"type": "string", "const": ce.CONTENT_TYPE},
        ),
        Header(ce.H_SUBSCRIPTION, "extension: the subscription id (same as the key)", DECIMAL_ID),
        Header(
            ce.H_SEQUENCE,
            "extension: the event's number within its subscription: 1, 2, 3, … with no gaps, "
            f"zero-padded to {ce.SEQUENCE_DIGITS} digits (`00000000000000000001`) so it sorts as "
            "a string too; read it as an integer",
            {"type": "string", "pattern": f"^[0-9]{{{ce.SEQUENCE_DIGITS}}}$"},
        ),
        Header(
            ce.H_SCHEMA_VERSION,
            "extension: the version of this type's payload schema (an integer, from 1)",
            fixed(version_value, {"type": "string", "pattern": "^[1-9][0-9]*$"}),
        ),
    ]


def headers_schema(model: type[EventPayload]) -> dict[str, Any]:
    """A JSON Schema of the headers of ``model``'s records (AsyncAPI ``headers``)."""
    found = headers(model)
    return {
        "type": "object",
        "required": [h.name for h in found],
        "properties": {h.name: {**h.schema, "description": h.doc} for h in found},
    }


KEY_DOC = (
    'the subscription id, ASCII decimal (`"42"`): every event of one subscription goes to '
    "one partition"
)
KEY_SCHEMA = {**DECIMAL_ID, "description": "The subscription id, ASCII decimal."}
