"""The checker's report: one line per invariant, with offending ids."""

from __future__ import annotations

from dataclasses import dataclass, field

from rich.console import Console
from rich.table import Table


@dataclass
class Check:
    name: str
    description: str
    checked: int = 0
    violations: list[str] = field(default_factory=list)
    duplicates: int = 0
    skipped: str | None = None  # why this check had no evidence to run on

    @property
    def ok(self) -> bool:
        return not self.violations and self.skipped is None


@dataclass
class Report:
    checks: list[Check]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def check(self, name: str) -> Check:
        return next(c for c in self.checks if c.name == name)

    def render(self, console: Console | None = None) -> None:
        console = console or Console()
        table = Table(title="Invariants")
        for column in ("invariant", "checked", "violations", "duplicates seen", "first offenders"):
            table.add_column(column)
        for c in self.checks:
            offenders = c.skipped or "; ".join(c.violations[:3])
            status = "[red]" if not c.ok else "[green]"
            table.add_row(
                f"{status}{c.name}[/] {c.description}",
                str(c.checked),
                str(len(c.violations)),
                str(c.duplicates),
                offenders,
            )
        console.print(table)
        console.print("[green]no violation[/]" if self.ok else "[red]VIOLATIONS FOUND[/]")
