"""The CloudEvents 1.0 Kafka binding (binary content mode) for billing events.

One codec shared by the relay (encode), the consumer kit and any checker (decode), so the wire
format is defined in one place (docs/EVENTS.md describes it for other teams):

* key: the subscription id as ASCII decimal (so one subscription's events share a partition);
* value: the JSON payload of the event, UTF-8;
* headers: ``ce_specversion`` ("1.0"), ``ce_id`` (the outbox event UUID), ``ce_type``
  (``billing.<EventType>``, e.g. ``billing.InvoicePaid``), ``ce_source``, ``ce_subject`` (the
  subscription id), ``ce_time`` (RFC 3339, UTC, microseconds), ``ce_dataschema`` (the URI of the
  payload's JSON Schema, its ``$id``), ``content-type`` ("application/json"), and the extensions
  ``ce_subscriptionid``, ``ce_sequence`` (per-subscription, starts at 1, no gaps; written
  zero-padded to 20 digits so it also sorts as a string) and ``ce_schemaversion`` (the payload
  schema version of that type).

The codec is pure: no I/O, no Kafka client types.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

SPEC_VERSION = "1.0"
TYPE_PREFIX = "billing."
DEFAULT_SOURCE = "urn:billing:outbox"
CONTENT_TYPE = "application/json"

H_ID = "ce_id"
H_TYPE = "ce_type"
H_SOURCE = "ce_source"
H_TIME = "ce_time"
H_SPECVERSION = "ce_specversion"
H_SUBJECT = "ce_subject"
H_DATASCHEMA = "ce_dataschema"
H_SUBSCRIPTION = "ce_subscriptionid"
H_SEQUENCE = "ce_sequence"
H_SCHEMA_VERSION = "ce_schemaversion"
H_CONTENT_TYPE = "content-type"

SEQUENCE_DIGITS = 20  # a bigint's digits and more: the string order is the number order
SCHEMA_URI_PREFIX = "urn:billing:schema:"

Headers = list[tuple[str, bytes]]


class InvalidCloudEvent(ValueError):
    """A Kafka record that is not a billing CloudEvent (missing or malformed attribute)."""


@dataclass(frozen=True, slots=True)
class CloudEvent:
    id: uuid.UUID
    event_type: str  # the domain name, e.g. "InvoicePaid" (ce_type without the prefix)
    source: str
    time: datetime
    subscription_id: int
    sequence: int
    schema_version: int
    data: bytes  # the JSON payload, exactly as published

    @property
    def ce_type(self) -> str:
        return ce_type(self.event_type)

    def payload(self) -> dict[str, object]:
        value = json.loads(self.data)
        if not isinstance(value, dict):
            raise InvalidCloudEvent(f"event {self.id}: payload is not a JSON object")
        return value


def ce_type(event_type: str) -> str:
    return f"{TYPE_PREFIX}{event_type}"


def schema_uri(event_type: str, schema_version: int) -> str:
    """The ``dataschema`` of a payload: the ``$id`` of its JSON Schema, e.g.
    ``urn:billing:schema:InvoicePaid:1`` (docs/schemas/events/InvoicePaid.v1.json)."""
    return f"{SCHEMA_URI_PREFIX}{event_type}:{schema_version}"


def format_sequence(sequence: int) -> str:
    return str(sequence).zfill(SEQUENCE_DIGITS)


def format_time(when: datetime) -> str:
    if when.tzinfo is None:
        raise ValueError("CloudEvent time must be timezone-aware")
    return when.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def parse_time(value: str) -> datetime:
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        raise ValueError("time without offset")
    return parsed.astimezone(UTC)


def encode_key(subscription_id: int) -> bytes:
    return str(subscription_id).encode("ascii")


def encode_headers(
    *,
    event_id: uuid.UUID,
    event_type: str,
    occurred_at: datetime,
    subscription_id: int,
    sequence: int,
    schema_version: int,
    source: str = DEFAULT_SOURCE,
) -> Headers:
    subject = str(subscription_id).encode("ascii")
    return [
        (H_SPECVERSION, b"1.0"),
        (H_ID, str(event_id).encode("ascii")),
        (H_TYPE, ce_type(event_type).encode("utf-8")),
        (H_SOURCE, source.encode("utf-8")),
        (H_SUBJECT, subject),
        (H_TIME, format_time(occurred_at).encode("ascii")),
        (H_DATASCHEMA, schema_uri(event_type, schema_version).encode("utf-8")),
        (H_CONTENT_TYPE, CONTENT_TYPE.encode("ascii")),
        (H_SUBSCRIPTION, subject),
        (H_SEQUENCE, format_sequence(sequence).encode("ascii")),
        (H_SCHEMA_VERSION, str(schema_version).encode("ascii")),
    ]


def encode(event: CloudEvent) -> tuple[bytes, bytes, Headers]:
    """(key, value, headers) of the Kafka record for ``event``."""
    headers = encode_headers(
        event_id=event.id,
        event_type=event.event_type,
        occurred_at=event.time,
        subscription_id=event.subscription_id,
        sequence=event.sequence,
        schema_version=event.schema_version,
        source=event.source,
    )
    return encode_key(event.subscription_id), event.data, headers


def _envelope(headers: Iterable[tuple[str, bytes]]) -> dict[str, str]:
    """The record's headers by lower-case name, once the envelope is one this code writes."""
    found: dict[str, str] = {}
    for name, raw in headers:
        try:
            found[name.lower()] = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidCloudEvent(f"header {name} is not UTF-8") from exc
    for name in (H_SPECVERSION, H_CONTENT_TYPE, H_TYPE):
        if name not in found:
            raise InvalidCloudEvent(f"missing header {name}")
    if found[H_SPECVERSION] != SPEC_VERSION:
        raise InvalidCloudEvent(f"unsupported specversion {found[H_SPECVERSION]!r}")
    if not found[H_CONTENT_TYPE].startswith(CONTENT_TYPE):
        raise InvalidCloudEvent(f"unsupported content-type {found[H_CONTENT_TYPE]!r}")
    full_type = found[H_TYPE]
    if not full_type.startswith(TYPE_PREFIX) or len(full_type) == len(TYPE_PREFIX):
        raise InvalidCloudEvent(f"ce_type {full_type!r} is not a billing event type")
    return found


def decode(
    key: bytes | None, value: bytes | None, headers: Iterable[tuple[str, bytes]]
) -> CloudEvent:
    """Parse a Kafka record written by :func:`encode`; raise :class:`InvalidCloudEvent`."""
    found = _envelope(headers)

    def need(name: str) -> str:
        if name not in found:
            raise InvalidCloudEvent(f"missing header {name}")
        return found[name]

    full_type = need(H_TYPE)
    if value is None:
        raise InvalidCloudEvent("record has no value")
    try:
        event = CloudEvent(
            id=uuid.UUID(need(H_ID)),
            event_type=full_type.removeprefix(TYPE_PREFIX),
            source=need(H_SOURCE),
            time=parse_time(need(H_TIME)),
            subscription_id=int(need(H_SUBSCRIPTION)),
            sequence=int(need(H_SEQUENCE)),
            schema_version=int(found.get(H_SCHEMA_VERSION, "1")),
            data=value,
        )
    except ValueError as exc:
        if isinstance(exc, InvalidCloudEvent):
            raise
        raise InvalidCloudEvent(f"malformed attribute: {exc}") from exc
    if key is not None and key != encode_key(event.subscription_id):
        raise InvalidCloudEvent(
            f"event {event.id}: key {key!r} differs from subscription {event.subscription_id}"
        )
    if H_SUBJECT in found and found[H_SUBJECT] != str(event.subscription_id):
        raise InvalidCloudEvent(
            f"event {event.id}: subject {found[H_SUBJECT]!r} differs from subscription "
            f"{event.subscription_id}"
        )
    if event.sequence < 1:
        raise InvalidCloudEvent(f"event {event.id}: sequence {event.sequence} < 1")
    return event
