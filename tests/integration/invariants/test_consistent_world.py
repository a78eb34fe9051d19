"""A consistent world, with every kind of evidence, has no violation."""

from __future__ import annotations

from billing_core.invariants.checker import check_all
from tests.integration.invariants.conftest import Scene


async def test_a_consistent_world_has_no_violation(scene: Scene) -> None:
    report = await scene.check()
    assert report.ok, [str(v) for c in report.checks for v in c.violations]
    assert report.complete
    assert [c.name for c in report.checks] == [
        "periods",
        "charges",
        "events",
        "sequence",
        "amounts",
        "lines",
        "numbers",
        "stuck",
        "pauses",
    ]
    assert report.check("periods").checked == 5  # subscriptions
    assert report.check("sequence").checked == 5  # subscriptions with events
    assert report.check("stuck").checked == 1  # the PAST_DUE invoice due tomorrow


async def test_redelivered_events_are_counted_not_violations(scene: Scene) -> None:
    paid = scene.world.find("a", "InvoicePaid")
    canceled = scene.world.find("d", "SubscriptionCanceled")
    topic = await scene.read([*scene.world.published(), paid, canceled, paid])
    assert topic.records == len(scene.world.events) + 3
    report = await scene.check(topic=topic)
    assert report.ok, [str(v) for c in report.checks for v in c.violations]
    assert report.check("events").duplicates == 3
    assert report.check("sequence").duplicates == 3


async def test_without_a_ledger_the_payment_attempts_are_the_charge_evidence(
    scene: Scene,
) -> None:
    report = await check_all(scene.pool, now=scene.world.now, ledger=None, topic=None)
    assert report.ok and not report.complete
    assert report.check("events").skipped == "no Kafka topic read"
    assert report.check("charges").skipped is None
