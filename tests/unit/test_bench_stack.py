"""The benchmarks run on the one data-access stack: none imports SQLAlchemy, except the one
that measures SQLAlchemy against the driver."""

from __future__ import annotations

from pathlib import Path

from tests.support.imports import imported_names

BENCH = Path(__file__).resolve().parents[2] / "bench"
MEASURES_SQLALCHEMY = {"db_stack.py"}


def test_the_benchmarks_import_no_sqlalchemy() -> None:
    offenders = []
    for module in sorted(BENCH.glob("*.py")):
        if module.name in MEASURES_SQLALCHEMY:
            continue
        offenders += [
            f"{module.name}: {n}" for n in imported_names(module) if n.split(".")[0] == "sqlalchemy"
        ]
    assert offenders == []
