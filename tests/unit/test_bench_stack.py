"""The benchmarks run on the one data-access stack: none imports SQLAlchemy, except the one
that measures SQLAlchemy against the driver."""

from __future__ import annotations

import ast
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
MEASURES_SQLALCHEMY = {"db_stack.py"}


def test_the_benchmarks_import_no_sqlalchemy() -> None:
    offenders = []
    for module in sorted(BENCH.glob("*.py")):
        if module.name in MEASURES_SQLALCHEMY:
            continue
        for node in ast.walk(ast.parse(module.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [f"{module.name}: {n}" for n in names if n.split(".")[0] == "sqlalchemy"]
    assert offenders == []
