"""The database layer sits below everything that uses it: it imports the settings, the domain's
enums (the tables' CHECK values) and itself, nothing built on top (seeding, repositories, use
cases, services)."""

from __future__ import annotations

import ast
from pathlib import Path

import billing_core.db

ALLOWED = ("billing_core.db", "billing_core.settings", "billing_core.domain")


def test_the_db_modules_import_nothing_built_on_them() -> None:
    folder = Path(billing_core.db.__file__).parent
    offenders = []
    for module in sorted(folder.glob("*.py")):
        for node in ast.walk(ast.parse(module.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            offenders += [
                f"{module.name}: {name}"
                for name in names
                if name.split(".")[0] in {"billing_core", "services"}
                and not name.startswith(ALLOWED)
            ]
    assert offenders == []
