"""Liveness and readiness on the public port (no authentication); /metrics is on the internal
port (``services.api.app.internal_server``)."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from starlette.responses import Response

from billing_core.db import pg
from billing_core.db.pg import Statement
from billing_core.logging import get_logger
from services.api.context import get_context
from services.api.problems import UNAVAILABLE, ApiProblem
from services.api.routes.common import json_response, problems
from services.api.schemas import Health

router = APIRouter(tags=["operations"])
log = get_logger(__name__)
READY_TIMEOUT_SECONDS = 2.0
_PING = Statement("SELECT 1")


@router.get("/healthz", response_model=Health, summary="The process is up")
async def healthz() -> Response:
    return json_response(Health(status="ok"))


@router.get(
    "/readyz",
    response_model=Health,
    summary="The database answers",
    responses=problems(503),
)
async def readyz(request: Request) -> Response:
    try:
        async with asyncio.timeout(READY_TIMEOUT_SECONDS):
            async with get_context(request).pg.acquire() as conn:
                await pg.fetchval(conn, _PING)
    except Exception as exc:
        log.warning("not_ready", error=repr(exc))
        raise ApiProblem(UNAVAILABLE, "The database does not answer.") from exc
    return json_response(Health(status="ready"))
