"""The short fault-injection run (the full one: python -m tests.chaos.harness)."""

from __future__ import annotations

import pytest
from rich.console import Console

from tests.chaos.harness import ChaosConfig, render, run


@pytest.mark.slow
async def test_short_chaos_run_keeps_every_invariant() -> None:
    config = ChaosConfig(
        subscriptions=2_000,
        kills=5,
        kill_interval_s=3.0,
        outage_s=8.0,
        due_window_s=15.0,
        deadline_s=360.0,
        report_timeout_s=120.0,
    )
    outcome = await run(config)
    render(outcome, Console(stderr=True))
    assert outcome.faults["kill -9"] == 5
    assert outcome.faults["redis outage"] == outcome.faults["kafka outage"] == 1
    assert outcome.faults["postgres restart"] == 1
    # every seeded period 0 and its renewal; a trial's first paid period
    trials = outcome.figures["trials"]
    assert trials == config.subscriptions // round(1 / config.trial_share)
    assert outcome.figures["invoices"] >= 2 * (config.subscriptions - trials) + trials
    assert outcome.figures["trials ended into a paid period"] > 0, outcome.figures
    # customers canceled, changed plans and paused through the API process during the run
    answered = {a: n.get("200", 0) for a, n in outcome.customer_answers.items()}
    assert answered.get("cancel now", 0) > 0, outcome.customer_answers
    assert answered.get("cancel at period end", 0) > 0, outcome.customer_answers
    assert answered.get("upgrade", 0) > 0, outcome.customer_answers
    assert answered.get("downgrade", 0) > 0, outcome.customer_answers
    assert answered.get("pause", 0) + answered.get("pause as draft", 0) > 0
    # charges answered too late whose webhook was lost were settled by looking up their key
    assert outcome.figures["results learned by look-up"] > 0, outcome.figures
    assert outcome.report.ok, [(c.name, c.violations[:5]) for c in outcome.report.checks]
    assert outcome.problems == []
