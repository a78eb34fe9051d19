"""What a source file imports, read from its syntax tree (no import is run)."""

from __future__ import annotations

import ast
from pathlib import Path


def imported_names(module: Path) -> list[str]:
    """Every module name ``module`` imports (``import a.b`` and ``from a.b import c``: ``a.b``)."""
    names: list[str] = []
    for node in ast.walk(ast.parse(module.read_text())):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
    return names
