"""The OpenAPI document as published (``/openapi.json``) and checked in (docs/openapi.json).

FastAPI's generated document, made to say what the API does: every error answer is
``application/problem+json`` with the ``Problem`` schema (and nothing else), every operation
documents the 500 problem, and every request body carries its examples.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from services.api.problems import PROBLEM_JSON
from services.api.schemas import Problem

OPENAPI_PATH = "docs/openapi.json"
PROBLEM_REF = {"$ref": "#/components/schemas/Problem"}
INTERNAL_ERROR = {
    "description": "Internal error: nothing was changed unless the answer says so; quote the "
    "problem's requestId when reporting it",
    "content": {PROBLEM_JSON: {"schema": PROBLEM_REF}},
}
_FASTAPI_VALIDATION = ("HTTPValidationError", "ValidationError")


def _is_error(status: str) -> bool:
    return status[0] in "45" or status == "default"


def _with_examples(media: dict[str, Any], schemas: dict[str, Any]) -> None:
    schema = media.get("schema", {})
    ref = schema.get("$ref", "")
    examples = schemas.get(ref.rsplit("/", 1)[-1], {}).get("examples") or schema.get("examples")
    if examples and "examples" not in media:
        media["examples"] = {f"example{n}": {"value": v} for n, v in enumerate(examples, 1)}


def normalise(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` (FastAPI's) with problem-only errors, a 500 everywhere and body examples."""
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    for path_item in doc.get("paths", {}).values():
        for operation in path_item.values():
            responses = operation.setdefault("responses", {})
            for status, response in responses.items():
                if _is_error(status):
                    response["content"] = {PROBLEM_JSON: {"schema": dict(PROBLEM_REF)}}
            responses.setdefault("500", dict(INTERNAL_ERROR))
            body = operation.get("requestBody", {}).get("content", {})
            for media in body.values():
                _with_examples(media, schemas)
    for name in _FASTAPI_VALIDATION:
        schemas.pop(name, None)
    problem = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
    schemas.update(problem.pop("$defs", {}))
    schemas["Problem"] = problem
    doc["components"]["schemas"] = dict(sorted(schemas.items()))
    return doc


def document(app: FastAPI) -> dict[str, Any]:
    """The document of ``app`` as it is published."""
    return normalise(
        get_openapi(
            title=app.title,
            version=app.version,
            openapi_version=app.openapi_version,
            description=app.description,
            routes=app.routes,
        )
    )


def install(app: FastAPI) -> None:
    """Serve :func:`document` at the app's ``openapi_url`` (built once, on first request)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = document(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
