"""The whole-system run's figures beyond the gateway's ledger, with their targets: each
process's resident memory flat after warm-up, the outbox lag's p99 under 5 s in every window of
the run, every webhook the simulator sent recorded, and autovacuum keeping each large table's
dead rows below the point where it would vacuum the table; and, to read that last one by, the
longest transaction that kept dead rows from being removed. The rules are pure; the reads are
named statements on the benchmark's connection."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from billing_core.db import pg

RSS_GROWTH_LIMIT = 0.20
RECEIPT_DELAY_TARGET_S = 300.0
WARM_UP_SHARE = 0.10  # the first tenth of the run: imports, caches, pools filling
LAG_WINDOW_S = 10
LAG_P99_TARGET_S = 5.0
LARGEST_TABLES = 10
MIB = 1024 * 1024

# Each event's lag as its consumers see it: publication minus the event's own time (occurred_at,
# the CloudEvent's ``time``), in whole hundredths of a second rounded up, counted per window of
# publication since the run's start.
_LAG_HISTOGRAM = pg.Statement(
    """
    SELECT floor(extract(epoch FROM published_at - :since)
                 / CAST(:window_s AS integer))::int AS slot,
           ceil(extract(epoch FROM published_at - occurred_at) * 100)::bigint AS lag_cs,
           count(*) AS events
    FROM outbox_event
    WHERE published_at IS NOT NULL AND occurred_at >= :since
    GROUP BY 1, 2
    """
)

# The largest tables with their autovacuum trigger: the table's own storage parameters where
# set, the server's settings otherwise.
_TABLES = pg.Statement(
    """
    SELECT s.relname AS name, s.n_live_tup AS live, s.n_dead_tup AS dead,
           s.last_autovacuum, s.autovacuum_count,
           pg_total_relation_size(s.relid) AS total_bytes,
           coalesce(o.scale_factor,
                    current_setting('autovacuum_vacuum_scale_factor')::float8) AS scale_factor,
           coalesce(o.threshold,
                    current_setting('autovacuum_vacuum_threshold')::bigint) AS threshold
    FROM pg_stat_user_tables s
    JOIN pg_class c ON c.oid = s.relid
    CROSS JOIN LATERAL (
        SELECT (max(option_value) FILTER (
                    WHERE option_name = 'autovacuum_vacuum_scale_factor'))::float8
                 AS scale_factor,
               (max(option_value) FILTER (
                    WHERE option_name = 'autovacuum_vacuum_threshold'))::bigint AS threshold
        FROM pg_options_to_table(c.reloptions)
    ) o
    ORDER BY total_bytes DESC, s.relname
    LIMIT :tables
    """
)

_WEBHOOKS_RECORDED = pg.Statement("SELECT count(*) FROM webhook_event")

# Each receipt's delay as the customer sees it: the e-mail's sending minus the payment's own
# time (its InvoicePaid event's occurred_at), in whole hundredths of a second rounded up; and
# the payments of the run, each of which owes one receipt.
_RECEIPT_DELAYS = pg.Statement(
    """
    SELECT ceil(extract(epoch FROM e.sent_at - o.occurred_at) * 100)::bigint AS delay_cs,
           count(*) AS receipts
    FROM notifier_email e
    JOIN outbox_event o ON o.event_id = e.event_id
    WHERE e.event_type = 'InvoicePaid' AND e.sent_at IS NOT NULL AND o.occurred_at >= :since
    GROUP BY 1
    """
)
_PAYMENTS = pg.Statement(
    "SELECT count(*) FROM outbox_event WHERE event_type = 'InvoicePaid' AND occurred_at >= :since"
)

# The oldest transaction that keeps this database's dead rows from being removed: one of its
# own sessions holding a snapshot, or a transaction id in any database of the server (every
# snapshot taken meanwhile counts that id as running, so its xmin stays at or below it).
_OLDEST_TRANSACTION = pg.Statement(
    """
    SELECT datname AS database, application_name, coalesce(state, '') AS state,
           extract(epoch FROM now() - xact_start)::float8 AS age_s
    FROM pg_stat_activity
    WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()
      AND (backend_xid IS NOT NULL
           OR (datname = current_database() AND backend_xmin IS NOT NULL))
    ORDER BY xact_start
    LIMIT 1
    """
)


@dataclass(frozen=True)
class RssGrowth:
    """Resident bytes at the end of the warm-up and at the end of the run."""

    after_warm_up: int
    at_end: int

    @property
    def growth(self) -> float:
        return self.at_end / self.after_warm_up - 1

    @property
    def flat(self) -> bool:
        return self.growth <= RSS_GROWTH_LIMIT


def rss_growth(samples: Sequence[tuple[float, int]]) -> RssGrowth:
    """From the last sample of the warm-up (the first :data:`WARM_UP_SHARE` of the sampled time)
    to the last sample; ``samples`` are (seconds, bytes) in time order."""
    if not samples:
        raise ValueError("no sample")
    first, last = samples[0][0], samples[-1][0]
    warm_up_ends = first + WARM_UP_SHARE * (last - first)
    after_warm_up = [rss for t, rss in samples if t <= warm_up_ends][-1]
    return RssGrowth(after_warm_up, samples[-1][1])


def percentile(counts: Mapping[int, int], q: float) -> int:
    """Nearest rank over a histogram (value: how many): the smallest value that at least a
    share ``q`` of the counted values do not exceed."""
    total = sum(counts.values())
    if total == 0:
        raise ValueError("no value")
    rank = max(1, math.ceil(q * total))
    seen = 0
    for value in sorted(counts):
        seen += counts[value]
        if seen >= rank:
            return value
    raise AssertionError("unreachable: the ranks add up to the total")


@dataclass(frozen=True)
class OutboxLag:
    """Seconds from an event's time to its publication: p99 per window (keyed by the window's
    start, seconds since the run's start), and p50 / p99 over the run."""

    p99_by_window: dict[int, float]
    p50_s: float | None
    p99_s: float | None
    events: int

    @property
    def worst(self) -> tuple[int, float] | None:
        if not self.p99_by_window:
            return None
        return max(self.p99_by_window.items(), key=lambda item: (item[1], -item[0]))

    @property
    def within_target(self) -> bool:
        """Events were published, and every window's p99 is under the target."""
        worst = self.worst
        return worst is not None and worst[1] < LAG_P99_TARGET_S


def outbox_lag(rows: Iterable[tuple[int, int, int]], window_s: int = LAG_WINDOW_S) -> OutboxLag:
    """From (window, lag in hundredths of a second, events) rows."""
    by_window: dict[int, dict[int, int]] = {}
    overall: dict[int, int] = {}
    for slot, lag_cs, events in rows:
        by_window.setdefault(slot, {})[lag_cs] = events
        overall[lag_cs] = overall.get(lag_cs, 0) + events
    return OutboxLag(
        p99_by_window={
            slot * window_s: percentile(lags, 0.99) / 100
            for slot, lags in sorted(by_window.items())
        },
        p50_s=percentile(overall, 0.5) / 100 if overall else None,
        p99_s=percentile(overall, 0.99) / 100 if overall else None,
        events=sum(overall.values()),
    )


@dataclass(frozen=True)
class TableHealth:
    name: str
    live: int
    dead: int
    last_autovacuum: datetime | None
    autovacuum_count: int
    total_bytes: int
    scale_factor: float
    threshold: int

    @property
    def vacuums_above(self) -> float:
        """The dead rows past which autovacuum takes the table up (PostgreSQL's own rule)."""
        return self.threshold + self.scale_factor * self.live

    @property
    def autovacuum_keeping_up(self) -> bool:
        return self.dead <= self.vacuums_above


@dataclass(frozen=True)
class HeldTransaction:
    """An open transaction: in which database, by which process, in what state, since when."""

    database: str
    application_name: str
    state: str
    age_s: float


def longest(held: HeldTransaction | None, seen: HeldTransaction | None) -> HeldTransaction | None:
    if held is None or (seen is not None and seen.age_s > held.age_s):
        return seen
    return held


@dataclass(frozen=True)
class Webhooks:
    """Events the simulator produced (one per charge result it stored, less those its
    ``webhook_loss_rate`` fault kept back) and the distinct events the API recorded."""

    sent: int
    recorded: int

    @property
    def lost(self) -> int:
        return max(0, self.sent - self.recorded)


async def read_outbox_lag(conn: pg.Connection, since: datetime) -> OutboxLag:
    rows = await pg.fetch(conn, _LAG_HISTOGRAM, {"since": since, "window_s": LAG_WINDOW_S})
    return outbox_lag((int(r["slot"]), int(r["lag_cs"]), int(r["events"])) for r in rows)


async def read_oldest_transaction(conn: pg.Connection) -> HeldTransaction | None:
    row = await pg.fetchrow(conn, _OLDEST_TRANSACTION)
    return None if row is None else HeldTransaction(**row)


async def read_tables(conn: pg.Connection) -> list[TableHealth]:
    rows = await pg.fetch(conn, _TABLES, {"tables": LARGEST_TABLES})
    return [TableHealth(**row) for row in rows]


async def read_receipts(conn: pg.Connection, since: datetime) -> Receipts:
    rows = await pg.fetch(conn, _RECEIPT_DELAYS, {"since": since})
    delays = {int(r["delay_cs"]): int(r["receipts"]) for r in rows}
    payments = int(await pg.fetchval(conn, _PAYMENTS, {"since": since}))
    return receipts(delays, payments)


async def read_webhooks(conn: pg.Connection, ledger_summary: Mapping[str, Any]) -> Webhooks:
    """``ledger_summary``: the simulator's ``/v1/ledger/summary``."""
    results = int(ledger_summary["charges_succeeded"]) + int(ledger_summary["declines"])
    sent = results - int(ledger_summary["webhooks_lost"])
    return Webhooks(sent=sent, recorded=int(await pg.fetchval(conn, _WEBHOOKS_RECORDED)))


@dataclass(frozen=True)
class Receipts:
    """Payments of the run, the receipts sent for them, and the delay from payment to sending
    (p50 / p99, seconds)."""

    payments: int
    sent: int
    p50_s: float | None
    p99_s: float | None

    @property
    def all_sent(self) -> bool:
        return self.sent >= self.payments

    @property
    def kept_pace(self) -> bool:
        """Every payment's receipt sent, 99 % of them within the target."""
        return self.all_sent and self.p99_s is not None and self.p99_s <= RECEIPT_DELAY_TARGET_S


def receipts(delays_cs: Mapping[int, int], payments: int) -> Receipts:
    """From a histogram of delays (hundredths of a second: how many receipts)."""
    sent = sum(delays_cs.values())
    return Receipts(
        payments=payments,
        sent=sent,
        p50_s=percentile(delays_cs, 0.5) / 100 if sent else None,
        p99_s=percentile(delays_cs, 0.99) / 100 if sent else None,
    )


@dataclass(frozen=True)
class Health:
    rss: dict[str, RssGrowth]
    lag: OutboxLag
    webhooks: Webhooks
    receipts: Receipts
    tables: list[TableHealth]
    longest_transaction: HeldTransaction | None

    def as_json(self) -> dict[str, object]:
        return {
            "rss": {n: {**asdict(g), "growth": g.growth} for n, g in self.rss.items()},
            "outbox_lag": asdict(self.lag),
            "webhooks": {**asdict(self.webhooks), "lost": self.webhooks.lost},
            "receipts": asdict(self.receipts),
            "tables": [asdict(t) for t in self.tables],
            "longest_transaction": None
            if self.longest_transaction is None
            else asdict(self.longest_transaction),
        }

    def lines(self) -> Iterator[tuple[str, bool | None]]:
        """One printed line each: its text and whether its target is met (None: no target)."""
        for name, g in self.rss.items():
            yield (
                f"{name} resident memory {g.after_warm_up / MIB:.0f} MiB after warm-up, "
                f"{g.at_end / MIB:.0f} MiB at the end ({g.growth:+.0%}; <= "
                f"{RSS_GROWTH_LIMIT:+.0%})",
                g.flat,
            )
        lag, worst = self.lag, self.lag.worst
        worst_text = (
            "no event published" if worst is None else f"{worst[1]:.2f} s at t={worst[0]} s"
        )
        yield (
            f"outbox lag p99 {worst_text} in its worst {LAG_WINDOW_S}-s window "
            f"(< {LAG_P99_TARGET_S:g} s in every one); p50 {lag.p50_s} s, p99 {lag.p99_s} s "
            f"over {lag.events} events",
            lag.within_target,
        )
        hooks = self.webhooks
        yield (
            f"webhooks {hooks.sent} sent, {hooks.recorded} recorded, {hooks.lost} lost (0)",
            hooks.lost == 0,
        )
        paid = self.receipts
        yield (
            f"receipts {paid.sent} sent of {paid.payments} payments; payment to sending p50 "
            f"{paid.p50_s} s, p99 {paid.p99_s} s (every one sent, p99 <= "
            f"{RECEIPT_DELAY_TARGET_S:g} s)",
            paid.kept_pace,
        )
        for t in self.tables:
            ratio = f"{t.dead / t.live:.2f}" if t.live else "-"
            last = "never" if t.last_autovacuum is None else f"{t.last_autovacuum:%H:%M:%S}"
            yield (
                f"table {t.name}: {t.total_bytes / MIB:.1f} MiB, {t.live} live, {t.dead} dead "
                f"(ratio {ratio}; autovacuum above {t.vacuums_above:.0f} = {t.threshold} + "
                f"{t.scale_factor:g} x live), {t.autovacuum_count} autovacuums, last {last}",
                t.autovacuum_keeping_up,
            )
        held = self.longest_transaction
        yield (
            "no transaction held vacuum back while sampled"
            if held is None
            else f"longest transaction holding vacuum back while sampled: {held.age_s:.0f} s, "
            f"{held.application_name or '(unnamed)'} in {held.database} ({held.state})",
            None,
        )
