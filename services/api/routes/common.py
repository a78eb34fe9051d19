"""Helpers shared by the routes: documented error responses, JSON bodies, version headers."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from fastapi import Request
from pydantic import BaseModel
from starlette.responses import Response

from billing_core.logging import get_logger
from services.api import signatures
from services.api.idempotency import JSON, Outcome
from services.api.problems import PROBLEM_JSON, WEBHOOK_SIGNATURE, ApiProblem, ProblemKind

log = get_logger(__name__)

_DESCRIPTIONS = {
    400: "Malformed request (bad JSON, missing or invalid Idempotency-Key, bad If-Match)",
    401: "Missing or invalid credentials",
    403: "The API key lacks the scope this operation needs",
    404: "Not found",
    409: "Conflict: version changed meanwhile, state forbids it, or same key in flight",
    413: "Request body too large",
    422: "Validation failed, unknown plan, or Idempotency-Key reused for another request",
    429: "Too many requests (see Retry-After and the RateLimit-* headers)",
    503: "Not ready, or (writes) the rate limit cannot be counted: retry later",
}


def problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses=`` entries for these problem statuses."""
    return {
        status: {
            "description": _DESCRIPTIONS.get(status, "Error"),
            "content": {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}},
        }
        for status in statuses
    }


async def signed_body(
    request: Request,
    signature: str | None,
    *,
    header: str,
    secrets: list[bytes],
    tolerance_seconds: int,
    now: datetime,
) -> bytes:
    """The raw body of a webhook whose ``header`` signs it with one of ``secrets`` (else a 401
    problem naming the header; the reason goes to the log only)."""
    body = await request.body()
    try:
        signatures.verify(
            signature, body, secrets=secrets, now=now, tolerance_seconds=tolerance_seconds
        )
    except signatures.SignatureError as exc:
        log.warning("webhook_signature_rejected", header=header, reason=str(exc))
        raise ApiProblem(WEBHOOK_SIGNATURE, f"The {header} header is invalid.") from exc
    return body


def dump(model: BaseModel) -> bytes:
    return model.model_dump_json(by_alias=True).encode()


def outcome(status: int, model: BaseModel, **headers: str) -> Outcome:
    return Outcome(status, dump(model), headers)


def json_response(model: BaseModel, *, status: int = 200, **headers: str) -> Response:
    return Response(dump(model), status_code=status, media_type=JSON, headers=headers)


def etag(version: int) -> str:
    return f'"{version}"'


_IF_MATCH = re.compile(r'^\s*(?:W/)?"?(\d{1,19})"?\s*$')


def expected_version(if_match: str | None, body_version: int | None) -> int | None:
    """The version the client expects, from ``expectedVersion`` or ``If-Match`` (either)."""
    header_version: int | None = None
    if if_match is not None and if_match.strip() != "*":
        m = _IF_MATCH.match(if_match)
        if m is None or int(m.group(1)) >= 2**63:
            raise ApiProblem(
                ProblemKind(400, "invalid-if-match", "Invalid If-Match"),
                'If-Match must be a subscription version, e.g. "3".',
            )
        header_version = int(m.group(1))
    if header_version is not None and body_version is not None and header_version != body_version:
        raise ApiProblem(
            ProblemKind(400, "invalid-if-match", "Invalid If-Match"),
            "If-Match and expectedVersion disagree.",
        )
    return body_version if body_version is not None else header_version
