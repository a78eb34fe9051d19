"""The plan catalogue."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Request
from starlette.responses import Response

from billing_core.domain.scopes import Scope
from billing_core.repo import plans as plans_repo
from billing_core.repo.api_clients import ApiClient
from services.api.auth import requires
from services.api.context import get_context
from services.api.routes.common import json_response, problems
from services.api.schemas import PlanList, PlanOut

router = APIRouter(tags=["plans"])


@router.get(
    "/plans",
    response_model=PlanList,
    summary="List active plans",
    responses=problems(401, 403, 429),
)
async def list_plans(
    request: Request, _client: Annotated[ApiClient, requires(Scope.PLANS_READ)]
) -> Response:
    async with get_context(request).pg.acquire() as conn:
        plans = await plans_repo.list_active(conn)
    return json_response(PlanList(items=[PlanOut.of(p) for p in plans]))
