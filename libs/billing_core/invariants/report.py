"""The checker's report: one :class:`Check` per invariant, each with its :class:`Violation` s.

Plain dataclasses, so tests assert on them (``report.check("charges").ids("double_charge")``)
and the command prints them (:meth:`Report.render`, or :meth:`Report.as_dict` as JSON).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table

SAMPLE = 5  # offenders shown per check in the table


@dataclass(frozen=True, slots=True)
class Violation:
    kind: str  # what went wrong, e.g. "double_charge", "period_gap"
    subject: str  # "invoice", "subscription", "event", "record"
    id: int | str  # the offender's id
    detail: str

    def __str__(self) -> str:
        return f"{self.subject} {self.id}: {self.detail} [{self.kind}]"


@dataclass
class Check:
    name: str
    description: str
    checked: int = 0  # how many rows (subscriptions, invoices, records) were examined
    violations: list[Violation] = field(default_factory=list)
    duplicates: int = 0  # tolerated duplicates seen (at-least-once deliveries, replays)
    skipped: str | None = None  # why this check had no evidence to run on
    notes: list[str] = field(default_factory=list)  # what was tolerated and why

    @property
    def ok(self) -> bool:
        return not self.violations

    def add(self, kind: str, subject: str, id_: int | str, detail: str) -> None:
        self.violations.append(Violation(kind, subject, id_, detail))

    def kinds(self) -> Counter[str]:
        return Counter(v.kind for v in self.violations)

    def ids(self, kind: str) -> list[int | str]:
        return [v.id for v in self.violations if v.kind == kind]


@dataclass
class Report:
    checks: list[Check]

    @property
    def ok(self) -> bool:
        """No violation anywhere (a skipped check has none, but see :attr:`complete`)."""
        return all(c.ok for c in self.checks)

    @property
    def complete(self) -> bool:
        """Every check had its evidence."""
        return all(c.skipped is None for c in self.checks)

    @property
    def violation_count(self) -> int:
        return sum(len(c.violations) for c in self.checks)

    def check(self, name: str) -> Check:
        for c in self.checks:
            if c.name == name:
                return c
        raise KeyError(name)

    def as_dict(self) -> dict[str, Any]:
        """``billing check --json``: every check with all its violations (not a sample)."""
        return {
            "ok": self.ok,
            "complete": self.complete,
            "violation_count": self.violation_count,
            "checks": [
                {
                    "name": c.name,
                    "description": c.description,
                    "ok": c.ok,
                    "checked": c.checked,
                    "duplicates": c.duplicates,
                    "skipped": c.skipped,
                    "notes": list(c.notes),
                    "violations": [
                        {"kind": v.kind, "subject": v.subject, "id": v.id, "detail": v.detail}
                        for v in c.violations
                    ],
                }
                for c in self.checks
            ],
        }

    def render(self, console: Console | None = None) -> None:
        console = console or Console()
        table = Table(title="Invariants", show_lines=True)
        table.add_column("invariant")
        table.add_column("checked", justify="right")
        table.add_column("violations", justify="right")
        table.add_column("duplicates seen", justify="right")
        table.add_column("first offenders / notes")
        for c in self.checks:
            if c.skipped is not None:
                colour, text = "yellow", f"skipped: {c.skipped}"
            elif c.violations:
                colour = "red"
                text = "\n".join(str(v) for v in c.violations[:SAMPLE])
                if len(c.violations) > SAMPLE:
                    text += f"\n… {len(c.violations) - SAMPLE} more"
            else:
                colour, text = "green", "\n".join(c.notes)
            table.add_row(
                f"[{colour}]{c.name}[/]\n{c.description}",
                str(c.checked),
                str(len(c.violations)),
                str(c.duplicates),
                text,
                style=None,
            )
        console.print(table)
        if not self.ok:
            console.print(f"[red]{self.violation_count} VIOLATION(S)[/]")
        elif not self.complete:
            console.print("[yellow]no violation, but some evidence was not given[/]")
        else:
            console.print("[green]no violation[/]")
