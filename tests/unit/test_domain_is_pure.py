"""The rule modules import no I/O library: every process can use them, tests need no server."""

from __future__ import annotations

import ast
from pathlib import Path

import billing_core.domain

FORBIDDEN = {"sqlalchemy", "asyncpg", "httpx", "redis", "aiokafka", "fastapi", "psycopg"}


def test_domain_modules_import_no_io_library() -> None:
    folder = Path(billing_core.domain.__file__).parent
    modules = sorted(folder.glob("*.py"))
    assert len(modules) >= 9
    offenders = []
    for module in modules:
        for node in ast.walk(ast.parse(module.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [f"{module.name}: {n}" for n in names if n.split(".")[0] in FORBIDDEN]
    assert offenders == []
