"""The rule modules import no I/O library: every process can use them, tests need no server."""

from __future__ import annotations

import ast
from pathlib import Path

import billing_core.domain
from tests.support.imports import imported_names

FORBIDDEN = {"sqlalchemy", "asyncpg", "httpx", "redis", "aiokafka", "fastapi", "psycopg"}


def test_domain_modules_import_no_io_library() -> None:
    folder = Path(billing_core.domain.__file__).parent
    modules = sorted(folder.glob("*.py"))
    assert len(modules) >= 9
    offenders = []
    for module in modules:
        offenders += [
            f"{module.name}: {n}" for n in imported_names(module) if n.split(".")[0] in FORBIDDEN
        ]
    assert offenders == []


def test_every_domain_module_postpones_annotations_and_reads_no_clock() -> None:
    folder = Path(billing_core.domain.__file__).parent
    for module in sorted(folder.glob("*.py")):
        tree = ast.parse(module.read_text())
        future = [
            n
            for n in tree.body
            if isinstance(n, ast.ImportFrom)
            and n.module == "__future__"
            and any(a.name == "annotations" for a in n.names)
        ]
        assert future, f"{module.name} lacks 'from __future__ import annotations'"
        calls = {
            node.func.attr
            for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
        }
        assert not calls & {"now", "utcnow", "today", "time", "monotonic"}, module.name
