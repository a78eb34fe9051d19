"""The 1st of the month as a plot (the demo's, and the whole-system benchmark's): gateway calls
per second against the limit, the backlogs over time, and below them any further panels."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BACKLOGS = ("due_subscriptions", "due_invoices", "open_invoices", "unpublished")


@dataclass(frozen=True)
class Panel:
    """A panel below the backlogs: one line per label, each (seconds, value) points, and a
    dashed line at ``target`` when one is set."""

    title: str
    ylabel: str
    lines: Mapping[str, Sequence[tuple[float, float]]]
    target: float | None = None
    target_label: str = "target"


def plot(
    samples: Sequence[tuple[float, Mapping[str, float]]],
    per_second: Sequence[Mapping[str, int]] | None,
    limit: int | None,
    path: Path,
    *,
    backlogs: Sequence[str] = BACKLOGS,
    panels: Sequence[Panel] = (),
    xlabel: str = "seconds since the demo started",
) -> None:
    """Write the plot (PNG or SVG, by the path's suffix); a panel without its data says so
    instead of staying blank."""
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    path.parent.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(2 + len(panels), 1, figsize=(10, 3.5 * (2 + len(panels))))
    top, bottom, *below = axes
    top.set_title("Gateway calls per second (simulator ledger)")
    top.set_ylabel("calls per second")
    if per_second:
        first = per_second[0]["second"]
        top.plot(
            [r["second"] - first for r in per_second],
            [r["calls"] for r in per_second],
            label="gateway calls/s",
        )
        if limit:
            top.axhline(limit, color="red", linestyle="--", label=f"limit ({limit}/s)")
        top.legend()
    else:
        why = "no gateway call" if per_second is not None else "simulator ledger unavailable"
        _empty(top, why)
    bottom.set_title("Backlogs over time")
    bottom.set_xlabel(xlabel)
    bottom.set_ylabel("backlog")
    if samples:
        t = [at for at, _ in samples]
        for key in backlogs:
            bottom.plot(t, [values[key] for _, values in samples], label=key.replace("_", " "))
        bottom.legend()
    else:
        _empty(bottom, "no sample")
    for ax, panel in zip(below, panels, strict=True):
        _draw(ax, panel, xlabel)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _draw(ax: Any, panel: Panel, xlabel: str) -> None:
    ax.set_title(panel.title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(panel.ylabel)
    drawn = False
    for label, points in panel.lines.items():
        if points:
            ax.plot([x for x, _ in points], [y for _, y in points], label=label)
            drawn = True
    if not drawn:
        _empty(ax, "no sample")
        return
    if panel.target is not None:
        ax.axhline(panel.target, color="red", linestyle="--", label=panel.target_label)
    ax.legend()


def _empty(ax: Any, why: str) -> None:
    ax.text(0.5, 0.5, why, ha="center", va="center", transform=ax.transAxes)
