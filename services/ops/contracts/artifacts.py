"""Every generated contract file by its path in the repository, and the write / check of them."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from billing_core.domain.event_payloads import PAYLOAD_MODELS, EventPayload
from services.ops.contracts import asyncapi, events_doc, monitoring, scope_table
from services.ops.contracts.event_schemas import SCHEMA_FOLDER, all_schemas


def dump_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False) + "\n"


def event_artifacts(models: Iterable[type[EventPayload]] = PAYLOAD_MODELS) -> dict[str, str]:
    """The event contract files generated from ``models`` (default: the published ones)."""
    chosen = list(models)
    files = {path: dump_json(schema) for path, schema in all_schemas(chosen).items()}
    files[asyncapi.ASYNCAPI_PATH] = asyncapi.render(chosen)
    files[events_doc.EVENTS_DOC_PATH] = events_doc.render(chosen)
    return files


def api_document() -> dict[str, Any]:
    """The API's OpenAPI document as ``/openapi.json`` serves it."""
    from billing_core.clock import SystemClock  # noqa: PLC0415
    from services.api import openapi  # noqa: PLC0415
    from services.api.app import create_app  # noqa: PLC0415
    from services.api.settings import ApiSettings  # noqa: PLC0415

    # The secrets an API is made with (it refuses none); the document does not show them.
    settings = ApiSettings(
        process_name="contracts", webhook_secrets="contracts", stripe_webhook_secrets="contracts"
    )
    return openapi.document(create_app(settings, SystemClock()))


def openapi_artifact(document: dict[str, Any] | None = None) -> dict[str, str]:
    """docs/openapi.json: ``document`` (default: the API's)."""
    from services.api.openapi import OPENAPI_PATH  # noqa: PLC0415

    return {OPENAPI_PATH: dump_json(api_document() if document is None else document)}


def scope_table_artifact(root: Path, document: dict[str, Any] | None = None) -> dict[str, str]:
    """docs/API.md under ``root`` with its scope table made from ``document``'s operations
    (default: the API's)."""
    from services.api.auth import SCHEME_NAME  # noqa: PLC0415

    text = _read(root / scope_table.API_DOC_PATH) or ""
    chosen = api_document() if document is None else document
    return {scope_table.API_DOC_PATH: scope_table.updated(text, chosen, SCHEME_NAME)}


def monitoring_artifacts(root: Path) -> dict[str, str]:
    """The PrometheusRule, from the rules file under ``root`` that promtool checks."""
    return {monitoring.PROMETHEUS_RULE_PATH: monitoring.render(root)}


def all_artifacts(root: Path) -> dict[str, str]:
    """Every generated contract file of the checkout at ``root``: ``make contracts`` writes
    these."""
    document = api_document()
    return {
        **event_artifacts(),
        **openapi_artifact(document),
        **scope_table_artifact(root, document),
        **monitoring_artifacts(root),
    }


def differences(root: Path, files: dict[str, str]) -> list[str]:
    """The paths under ``root`` whose content is not ``files[path]``, and, when ``files`` holds
    event schemas, schema files in their folder that nothing generates any more."""
    stale = [p for p, text in files.items() if _read(root / p) != text]
    known = {Path(p).name for p in files if p.startswith(SCHEMA_FOLDER + "/")}
    folder = root / SCHEMA_FOLDER
    if known and folder.is_dir():
        stale += [
            f"{SCHEMA_FOLDER}/{f.name}"
            for f in sorted(folder.glob("*.json"))
            if f.name not in known
        ]
    return sorted(stale)


def write(root: Path, files: dict[str, str]) -> list[str]:
    """Write ``files`` under ``root`` (and remove schema files nothing generates); return the
    paths that changed."""
    changed = differences(root, files)
    for path in changed:
        target = root / path
        if path in files:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(files[path], encoding="utf-8")
        else:
            target.unlink()
    return changed


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
