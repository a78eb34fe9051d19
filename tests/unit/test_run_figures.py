"""The whole-system benchmark's steady-state rules: resident memory flat after warm-up, the
outbox lag's percentiles per window, autovacuum keeping up, webhooks lost."""

from __future__ import annotations

import pytest

from bench.run_figures import (
    HeldTransaction,
    OutboxLag,
    TableHealth,
    Webhooks,
    longest,
    outbox_lag,
    percentile,
    receipts,
    rss_growth,
)

MIB = 1024 * 1024


def test_memory_is_compared_from_the_end_of_the_first_tenth_of_the_run_to_its_last_sample() -> None:
    # 0..100 s: the warm-up ends at 10 s; what happened before it (the climb) does not count.
    samples = [(0.0, 50 * MIB), (5.0, 90 * MIB), (10.0, 100 * MIB), (11.0, 105 * MIB)]
    samples += [(t, 110 * MIB) for t in range(20, 101, 10)]
    growth = rss_growth(samples)
    assert (growth.after_warm_up, growth.at_end) == (100 * MIB, 110 * MIB)
    assert growth.growth == pytest.approx(0.10)
    assert growth.flat


def test_memory_growing_past_a_fifth_after_warm_up_is_not_flat() -> None:
    samples = [(float(t), (100 + t // 4) * MIB) for t in range(0, 101)]  # +1 MiB every 4 s
    growth = rss_growth(samples)
    assert growth.after_warm_up == 102 * MIB and growth.at_end == 125 * MIB
    assert not growth.flat


def test_a_fifth_exactly_is_still_flat() -> None:
    assert rss_growth([(0.0, 100 * MIB), (50.0, 110 * MIB), (100.0, 120 * MIB)]).flat
    assert not rss_growth([(0.0, 100 * MIB), (100.0, 120 * MIB + 4096)]).flat


def test_the_sampled_time_is_measured_from_the_first_sample() -> None:
    # Sampled from 100 s to 200 s: the warm-up ends at 110 s, not at 20 s.
    samples = [(100.0, 10 * MIB), (105.0, 20 * MIB), (111.0, 30 * MIB), (200.0, 30 * MIB)]
    assert rss_growth(samples).after_warm_up == 20 * MIB


def test_percentile_is_the_nearest_rank_over_the_histogram() -> None:
    lags = {10: 98, 250: 1, 700: 1}  # 100 events: 98 at 0.10 s, one at 2.5 s, one at 7 s
    assert percentile(lags, 0.5) == 10
    assert percentile(lags, 0.98) == 10
    assert percentile(lags, 0.99) == 250
    assert percentile(lags, 1.0) == 700
    assert percentile({5: 1}, 0.99) == 5
    assert percentile({1: 1, 2: 1, 3: 1}, 0.5) == 2  # rank 1.5 rounds up to the 2nd value
    with pytest.raises(ValueError):
        percentile({}, 0.99)


def test_the_outbox_lag_has_a_p99_per_window_and_over_the_run() -> None:
    rows = [
        (0, 20, 99),  # 0-10 s: 99 events at 0.2 s, one at 6 s
        (0, 600, 1),
        (1, 30, 100),  # 10-20 s: 100 events at 0.3 s
        (3, 10, 50),  # 30-40 s: 50 at 0.1 s (nothing was published in 20-30 s)
    ]
    lag = outbox_lag(rows, window_s=10)
    assert lag.p99_by_window == {0: 0.2, 10: 0.3, 30: 0.1}
    assert lag.events == 250
    assert lag.p50_s == 0.2
    assert lag.p99_s == 0.3
    assert lag.worst == (10, 0.3)
    assert lag.within_target


def test_one_window_over_five_seconds_fails_the_lag_target_however_good_the_run() -> None:
    rows = [(w, 10, 1000) for w in range(30)] + [(12, 520, 50)]  # 12th window: 50 of 1050 late
    lag = outbox_lag(rows, window_s=10)
    assert lag.p99_s == 0.1
    assert lag.worst == (120, 5.2)
    assert not lag.within_target


def test_no_event_published_fails_the_lag_target() -> None:
    lag = outbox_lag([])
    assert lag == OutboxLag(p99_by_window={}, p50_s=None, p99_s=None, events=0)
    assert lag.worst is None
    assert not lag.within_target


def table(live: int, dead: int, scale_factor: float = 0.2, threshold: int = 50) -> TableHealth:
    return TableHealth(
        name="invoice",
        live=live,
        dead=dead,
        last_autovacuum=None,
        autovacuum_count=0,
        total_bytes=0,
        scale_factor=scale_factor,
        threshold=threshold,
    )


def test_autovacuum_keeps_up_while_the_dead_rows_stay_at_or_below_its_trigger() -> None:
    # PostgreSQL vacuums a table once its dead rows pass threshold + scale factor x live.
    assert table(live=20_000, dead=4_050).autovacuum_keeping_up
    assert not table(live=20_000, dead=4_051).autovacuum_keeping_up
    assert table(live=20_000, dead=4_051, scale_factor=0.5).autovacuum_keeping_up
    assert table(live=0, dead=50).autovacuum_keeping_up
    assert not table(live=0, dead=51).autovacuum_keeping_up


def test_a_webhook_is_lost_when_the_api_recorded_fewer_events_than_were_sent() -> None:
    assert Webhooks(sent=20_587, recorded=20_587).lost == 0
    assert Webhooks(sent=20_587, recorded=20_580).lost == 7


def test_the_longest_held_transaction_is_kept_across_samples() -> None:
    relay = HeldTransaction("billing", "billing.relay.pg", "active", 0.2)
    notifier = HeldTransaction("billing", "billing.notifier.pg", "idle in transaction", 95.0)
    held = None
    for seen in (None, relay, notifier, None, relay):
        held = longest(held, seen)
    assert held == notifier


def test_receipts_keep_pace_when_each_payment_has_one_and_99_percent_left_within_5_minutes() -> (
    None
):
    # 990 receipts 2.5 s after their payment, 10 at 400 s: the 99th is still 2.5 s.
    paid = receipts({250: 990, 40_000: 10}, payments=1_000)
    assert (paid.sent, paid.p50_s, paid.p99_s) == (1_000, 2.5, 2.5)
    assert paid.kept_pace


def test_receipts_fall_behind_when_the_p99_is_over_five_minutes_or_one_is_missing() -> None:
    assert not receipts({250: 980, 40_000: 20}, payments=1_000).kept_pace
    assert not receipts({250: 999}, payments=1_000).kept_pace
    assert not receipts({}, payments=0).kept_pace
