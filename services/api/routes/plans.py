"""The plan catalogue."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from billing_core.repo import plans as plans_repo
from services.api.auth import CurrentClient
from services.api.context import get_context
from services.api.routes.common import json_response, problems
from services.api.schemas import PlanList, PlanOut

router = APIRouter(tags=["plans"])


@router.get("/plans", response_model=PlanList, summary="List active plans", responses=problems(401))
async def list_plans(request: Request, _client: CurrentClient) -> Response:
    async with get_context(request).reads() as session:
        plans = await plans_repo.list_active(session)
    return json_response(PlanList(items=[PlanOut.of(p) for p in plans]))
