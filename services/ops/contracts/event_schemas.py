"""The JSON Schema (draft 2020-12) of every event payload model, as published."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from billing_core.cloudevents import ce_type, schema_uri
from billing_core.domain.event_payloads import PAYLOAD_MODELS, EventPayload

DRAFT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_FOLDER = "docs/schemas/events"


def schema_path(model: type[EventPayload]) -> str:
    """Where the model's schema is checked in, e.g. ``docs/schemas/events/InvoicePaid.v1.json``."""
    return f"{SCHEMA_FOLDER}/{model.event_type}.v{model.version}.json"


def payload_schema(model: type[EventPayload]) -> dict[str, Any]:
    """The schema of ``model``'s JSON, with its ``$id`` (the events' ``ce_dataschema``)."""
    body = model.model_json_schema(mode="serialization")
    body["title"] = f"{ce_type(model.event_type)} payload, version {model.version}"
    return {"$schema": DRAFT, "$id": schema_uri(model.event_type, model.version), **body}


def all_schemas(
    models: Iterable[type[EventPayload]] = PAYLOAD_MODELS,
) -> dict[str, dict[str, Any]]:
    """Every model's schema by the path it is checked in at."""
    return {schema_path(m): payload_schema(m) for m in models}


def inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with its local ``#/$defs/...`` references replaced by their definitions, for
    documents that embed it (AsyncAPI)."""
    defs = schema.get("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                target = resolve(copy.deepcopy(defs[ref.removeprefix("#/$defs/")]))
                rest = {k: resolve(v) for k, v in node.items() if k != "$ref"}
                return {**target, **rest}
            return {k: resolve(v) for k, v in node.items() if k != "$defs"}
        if isinstance(node, list):
            return [resolve(v) for v in node]
        return node

    resolved: dict[str, Any] = resolve(schema)
    return resolved
