"""The demo's PNG: gateway calls per second against the limit, and the backlogs over time."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

BACKLOGS = ("due_subscriptions", "due_invoices", "open_invoices", "unpublished")


def plot(
    samples: Sequence[tuple[float, Mapping[str, int]]],
    per_second: Sequence[Mapping[str, int]] | None,
    limit: int | None,
    path: Path,
) -> None:
    """Write the plot; a panel without its data says so instead of staying blank."""
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    path.parent.mkdir(parents=True, exist_ok=True)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 7), sharex=False)
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
        top.text(0.5, 0.5, why, ha="center", va="center", transform=top.transAxes)
    bottom.set_title("Backlogs over time")
    bottom.set_xlabel("seconds since the demo started")
    bottom.set_ylabel("backlog")
    if samples:
        t = [at for at, _ in samples]
        for key in BACKLOGS:
            bottom.plot(t, [values[key] for _, values in samples], label=key.replace("_", " "))
        bottom.legend()
    else:
        bottom.text(0.5, 0.5, "no sample", ha="center", va="center", transform=bottom.transAxes)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
