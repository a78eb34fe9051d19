"""Each kind of violation injected into the data is reported, with the offender's id."""

from __future__ import annotations

import json
from datetime import timedelta

from sqlalchemy import text

from billing_core.domain.period import Interval, period_bounds
from billing_core.invariants.checker import check_all
from billing_core.invariants.ledger import LedgerEvidence
from tests.integration.invariants.conftest import Scene


async def sql(scene: Scene, statement: str, **params: object) -> None:
    async with scene.engine.begin() as conn:
        await conn.execute(text(statement), params)


# -- periods -----------------------------------------------------------------------------------


async def test_a_second_renewal_for_a_period_with_another_start(scene: Scene) -> None:
    # The unique index is on (subscription, period_start): a wrong start slips past it.
    sub, inv = scene.world.subs["a"], scene.world.invoices[("a", 1)]
    await sql(
        scene,
        "INSERT INTO invoice (subscription_id, customer_id, kind, period_index, period_start, "
        "period_end, subtotal, amount, currency, status) SELECT subscription_id, customer_id, "
        "kind, period_index, period_start + interval '1 hour', period_end, subtotal, amount, "
        "currency, 'VOID' FROM invoice WHERE id = :inv",
        inv=inv,
    )
    periods = (await scene.check()).check("periods")
    assert periods.ids("duplicate_renewal") == [sub]
    assert "period 1" in str(periods.violations[0])


async def test_a_period_advanced_without_its_invoice(scene: Scene) -> None:
    sub, anchor = scene.world.subs["a"], scene.world.anchors["a"]
    nxt = period_bounds(anchor, Interval.MONTH, scene.world.current["a"] + 1, "UTC")
    await sql(
        scene,
        "UPDATE subscription SET period_index = period_index + 1, current_period_start = :s, "
        "current_period_end = :e WHERE id = :id",
        s=nxt.start,
        e=nxt.end,
        id=sub,
    )
    report = await scene.check(now=nxt.start + timedelta(minutes=1))
    assert report.check("periods").kinds() == {"period_gap": 1}
    assert report.check("periods").ids("period_gap") == [sub]


async def test_a_missing_period_between_two_invoiced_ones(scene: Scene) -> None:
    sub, inv = scene.world.subs["a"], scene.world.invoices[("a", 1)]
    await sql(scene, "DELETE FROM payment_attempt WHERE invoice_id = :i", i=inv)
    await sql(scene, "DELETE FROM invoice WHERE id = :i", i=inv)
    ledger = LedgerEvidence({i: n for i, n in scene.world.charged.items() if i != inv})
    periods = (await scene.check(ledger=ledger)).check("periods")
    assert periods.ids("period_gap") == [sub]
    assert "periods 1..1 have no invoice" in str(periods.violations[0])


async def test_a_period_starting_inside_the_one_before_is_an_overlap_unless_a_restart(
    scene: Scene,
) -> None:
    """A change to another billing interval starts its period inside the one before (cut short
    there and credited): only then is it no overlap."""
    name = "a"
    sub, n = scene.world.subs[name], scene.world.current[name]
    inv = scene.world.invoices[(name, n)]
    start = period_bounds(scene.world.anchors[name], Interval.MONTH, n, "UTC").start
    cut = start - timedelta(days=1)
    await sql(scene, "UPDATE invoice SET period_start = :cut WHERE id = :i", cut=cut, i=inv)
    await sql(
        scene, "UPDATE subscription SET current_period_start = :cut WHERE id = :s", cut=cut, s=sub
    )
    periods = (await scene.check()).check("periods")
    assert periods.kinds() == {"period_overlap": 1} and periods.ids("period_overlap") == [sub]

    # The same periods after a change to another interval that started period n at ``cut``.
    await sql(
        scene,
        "INSERT INTO outbox_event (event_id, aggregate_id, sequence, event_type, payload, "
        "occurred_at) VALUES (gen_random_uuid(), :s, 1000, 'SubscriptionPlanChanged', "
        "CAST(:payload AS jsonb), :cut)",
        s=sub,
        cut=cut,
        payload=json.dumps(
            {
                "subscriptionId": sub,
                "oldPlanCode": "BASIC_MONTHLY",
                "newPlanCode": "BASIC_MONTHLY",
                "prorationDue": 0,
                "changedAt": cut.isoformat(),
                "effective": "now",
                "newPeriodStart": cut.isoformat(),
                "newPeriodEnd": period_bounds(cut, Interval.MONTH, 0, "UTC").end.isoformat(),
            }
        ),
    )
    assert (await scene.check()).check("periods").ok


async def test_an_active_subscription_not_renewed_in_time(scene: Scene) -> None:
    later = scene.world.now + timedelta(days=62)
    report = await scene.check(now=later)
    expected = sorted(scene.world.subs[n] for n in ("a", "b", "c"))  # not PAST_DUE, CANCELED
    assert sorted(report.check("periods").ids("renewal_overdue")) == expected


# -- charges -----------------------------------------------------------------------------------


async def test_a_second_successful_charge_for_an_invoice(scene: Scene) -> None:
    inv = scene.world.invoices[("b", 1)]
    ledger = LedgerEvidence({**scene.world.charged, inv: 2})
    charges = (await scene.check(ledger=ledger)).check("charges")
    assert charges.kinds() == {"double_charge": 1}
    assert charges.ids("double_charge") == [inv]


async def test_the_gateway_audit_of_duplicates_is_reported_too(scene: Scene) -> None:
    inv = scene.world.invoices[("a", 0)]
    ledger = LedgerEvidence(dict(scene.world.charged), [inv])
    assert (await scene.check(ledger=ledger)).check("charges").ids("double_charge") == [inv]


async def test_two_keys_recording_a_success(scene: Scene) -> None:
    inv = scene.world.invoices[("a", 2)]
    await sql(scene, "UPDATE invoice SET attempt_count = 1 WHERE id = :i", i=inv)
    await sql(
        scene,
        "INSERT INTO payment_attempt (invoice_id, attempt_number, idempotency_key, source, "
        "outcome, amount, currency) VALUES (:i, 1, :k, 'WEBHOOK', 'SUCCESS', 990, 'EUR')",
        i=inv,
        k=f"inv-{inv}-try-1",
    )
    charges = (await scene.check()).check("charges")
    assert charges.ids("double_charge_recorded") == [inv]


async def test_a_success_report_that_was_never_applied_is_not_a_recorded_double_charge(
    scene: Scene,
) -> None:
    """A forged or mistaken webhook (attempt never made, another amount) is recorded with what
    it said and rejected (MISMATCH): it is not a second success of the invoice."""
    inv = scene.world.invoices[("a", 2)]
    await sql(
        scene,
        "INSERT INTO payment_attempt (invoice_id, attempt_number, idempotency_key, source, "
        "outcome, amount, currency) VALUES (:i, 99, :k99, 'WEBHOOK', 'SUCCESS', 990, 'EUR'),"
        " (:i, 0, :k0, 'WEBHOOK', 'SUCCESS', 1, 'EUR')",
        i=inv,
        k99=f"inv-{inv}-try-99",
        k0=f"other-inv-{inv}-try-0",
    )
    charges = (await scene.check()).check("charges")
    assert charges.ids("double_charge_recorded") == []


async def test_paid_without_a_charge_and_charged_without_being_paid(scene: Scene) -> None:
    paid = scene.world.invoices[("a", 1)]
    failed = scene.world.invoices[("d", 0)]
    ledger = LedgerEvidence({**{i: 1 for i in scene.world.charged if i != paid}, failed: 1})
    charges = (await scene.check(ledger=ledger)).check("charges")
    assert charges.kinds() == {"paid_without_charge": 1, "charged_not_paid": 1}
    assert charges.ids("paid_without_charge") == [paid]
    assert charges.ids("charged_not_paid") == [failed]


async def test_a_charge_being_recorded_or_reconciled_is_tolerated(scene: Scene) -> None:
    failed = scene.world.invoices[("d", 0)]
    open_ = scene.world.invoices[("e", 0)]  # OPEN, next attempt (the lease) in the future
    ledger = LedgerEvidence({**scene.world.charged, failed: 1, open_: 1})
    assert (await scene.check(ledger=ledger)).check("charges").ids("charged_not_paid") == [failed]
    await sql(
        scene,
        "INSERT INTO outbox_event (event_id, aggregate_id, sequence, event_type, payload, "
        "occurred_at) VALUES (gen_random_uuid(), :s, 99, 'PaymentReconciliationNeeded', "
        "CAST(:p AS jsonb), now())",
        s=scene.world.subs["d"],
        p=f'{{"invoiceId": {failed}}}',
    )
    # (that unpublished event is young: not an outbox violation either)
    report = await scene.check(ledger=ledger)
    assert report.check("charges").ok, report.check("charges").violations
    assert len(report.check("charges").notes) == 3


async def test_a_charge_for_an_invoice_the_database_does_not_have(scene: Scene) -> None:
    ledger = LedgerEvidence({**scene.world.charged, 999_999: 1})
    charges = (await scene.check(ledger=ledger)).check("charges")
    assert charges.ids("charge_unknown_invoice") == [999_999]


async def test_without_a_ledger_a_paid_invoice_needs_a_success_attempt(scene: Scene) -> None:
    inv = scene.world.invoices[("b", 1)]
    await sql(scene, "DELETE FROM payment_attempt WHERE invoice_id = :i", i=inv)
    report = await check_all(scene.pool, now=scene.world.now, ledger=None, topic=None)
    assert report.check("charges").ids("paid_without_charge") == [inv]


# -- events and sequences ----------------------------------------------------------------------


async def test_a_missing_invoice_paid_event(scene: Scene) -> None:
    gone = scene.world.find("b", "InvoicePaid", 1)  # the last: no hole behind it
    topic = await scene.read([e for e in scene.world.published() if e is not gone])
    events = (await scene.check(topic=topic)).check("events")
    assert events.kinds() == {"missing_InvoicePaid": 1, "lost_event": 1}
    assert events.ids("missing_InvoicePaid") == [gone.payload["invoiceId"]]
    assert events.ids("lost_event") == [str(gone.event_id)]


async def test_a_missing_subscription_canceled_event(scene: Scene) -> None:
    gone = scene.world.find("d", "SubscriptionCanceled")
    topic = await scene.read([e for e in scene.world.published() if e is not gone])
    events = (await scene.check(topic=topic)).check("events")
    assert events.ids("missing_SubscriptionCanceled") == [scene.world.subs["d"]]


async def test_an_event_still_in_the_outbox_is_pending_until_the_publish_bound(
    scene: Scene,
) -> None:
    waiting = scene.world.find("b", "InvoicePaid", 1)
    await sql(
        scene,
        "UPDATE outbox_event SET published_at = NULL WHERE event_id = :e",
        e=waiting.event_id,
    )
    topic = await scene.read([e for e in scene.world.published() if e is not waiting])
    report = await scene.check(topic=topic)
    assert report.check("events").ok, report.check("events").violations
    late = await scene.check(topic=topic, now=scene.world.now + timedelta(minutes=10))
    assert late.check("events").ids("unpublished_event") == [str(waiting.event_id)]


async def test_a_sequence_going_backwards(scene: Scene) -> None:
    events = scene.world.published()
    b = [e for e in events if e.subscription_id == scene.world.subs["b"]]
    swapped = [e for e in events if e not in b[2:4]]
    swapped[swapped.index(b[4]) + 1 : swapped.index(b[4]) + 1] = [b[3], b[2]]  # 1,2,5,4,3,6..
    report = await scene.check(topic=await scene.read(swapped))
    sequence = report.check("sequence")
    assert sequence.kinds() == {"sequence_backwards": 2}
    assert set(sequence.ids("sequence_backwards")) == {scene.world.subs["b"]}
    assert report.check("events").ok


async def test_a_hole_in_a_sequence(scene: Scene) -> None:
    gone = scene.world.find("a", "InvoiceCreated", 1)
    topic = await scene.read([e for e in scene.world.published() if e is not gone])
    sequence = (await scene.check(topic=topic)).check("sequence")
    assert sequence.ids("sequence_hole") == [scene.world.subs["a"]]
    assert f"sequences {gone.sequence} missing" in str(sequence.violations[0])


async def test_a_record_that_is_no_billing_event(scene: Scene) -> None:
    from aiokafka import AIOKafkaProducer  # noqa: PLC0415

    await scene.world.publish(scene.bootstrap, scene.topic)
    producer = AIOKafkaProducer(bootstrap_servers=scene.bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait(scene.topic, b"{}", key=b"1", headers=[("ce_id", b"x")])
    finally:
        await producer.stop()
    from billing_core.invariants.topic import read_topic  # noqa: PLC0415

    topic = await read_topic(scene.bootstrap, scene.topic)
    assert len(topic.invalid) == 1
    events = (await scene.check(topic=topic)).check("events")
    assert events.kinds() == {"invalid_record": 1}


# -- amounts and credit ------------------------------------------------------------------------


async def test_a_renewal_priced_with_the_plan_before_a_change(scene: Scene) -> None:
    inv = scene.world.invoices[("b", 1)]
    await sql(scene, "UPDATE invoice SET subtotal = 990, amount = 990 WHERE id = :i", i=inv)
    amounts = (await scene.check()).check("amounts")
    assert amounts.kinds() == {"wrong_subtotal": 1}
    assert amounts.ids("wrong_subtotal") == [inv]
    assert "PRO_MONTHLY costs 2990" in str(amounts.violations[0])


async def test_the_plan_history_also_comes_from_the_topic(scene: Scene) -> None:
    # The outbox row of the change was pruned: the topic still tells the plan of period 0.
    change = scene.world.find("b", "SubscriptionPlanChanged")
    topic = await scene.read()
    await sql(scene, "DELETE FROM outbox_event WHERE event_id = :e", e=change.event_id)
    assert (await scene.check(topic=topic)).check("amounts").ok
    without_topic = await check_all(
        scene.pool, now=scene.world.now, ledger=scene.world.ledger(), topic=None
    )
    assert without_topic.check("amounts").ids("wrong_subtotal") == [scene.world.invoices[("b", 0)]]


async def test_a_plan_change_stamped_before_one_committed_earlier(scene: Scene) -> None:
    # A second change of b, committed after the first (higher sequence), an hour before it.
    change = scene.world.find("b", "SubscriptionPlanChanged")
    await sql(
        scene,
        """
        INSERT INTO outbox_event (event_id, aggregate_id, sequence, event_type, schema_version,
                                  payload, occurred_at)
        SELECT gen_random_uuid(), aggregate_id,
               (SELECT max(sequence) + 1 FROM outbox_event WHERE aggregate_id = o.aggregate_id),
               event_type, schema_version,
               jsonb_set(payload, '{changedAt}', to_jsonb(to_char(
                   (CAST(payload ->> 'changedAt' AS timestamptz) - interval '1 hour')
                       AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'))),
               occurred_at
        FROM outbox_event o WHERE event_id = :e
        """,
        e=change.event_id,
    )
    amounts = (await scene.check()).check("amounts")
    assert amounts.ids("plan_change_out_of_order") == [scene.world.subs["b"]]
    assert "is before an earlier change's" in str(
        next(v for v in amounts.violations if v.kind == "plan_change_out_of_order")
    )


async def test_a_credit_balance_that_is_not_its_entries(scene: Scene) -> None:
    sub = scene.world.subs["c"]
    await sql(scene, "UPDATE subscription SET credit_balance = 600 WHERE id = :s", s=sub)
    amounts = (await scene.check()).check("amounts")
    assert amounts.kinds() == {"credit_mismatch": 1}
    assert amounts.ids("credit_mismatch") == [sub]


async def test_credit_applied_without_its_entry(scene: Scene) -> None:
    inv = scene.world.invoices[("c", 1)]
    await sql(scene, "DELETE FROM credit_entry WHERE invoice_id = :i", i=inv)
    await sql(
        scene,
        "UPDATE subscription SET credit_balance = 1500 WHERE id = :s",
        s=scene.world.subs["c"],
    )
    amounts = (await scene.check()).check("amounts")
    assert amounts.kinds() == {"credit_use_mismatch": 1}
    assert amounts.ids("credit_use_mismatch") == [inv]


# -- line items --------------------------------------------------------------------------------


async def test_an_invoice_whose_lines_do_not_add_up(scene: Scene) -> None:
    inv = scene.world.invoices[("a", 1)]
    await sql(
        scene,
        "UPDATE invoice_line SET unit_amount = 900, amount = 900 WHERE invoice_id = :i",
        i=inv,
    )
    lines = (await scene.check()).check("lines")
    assert lines.kinds() == {"lines_mismatch": 1}
    assert lines.ids("lines_mismatch") == [inv]
    assert "lines sum to 900" in str(lines.violations[0])


async def test_credit_applied_that_is_not_its_credit_line(scene: Scene) -> None:
    # Invoice c/1 consumed credit: turn its credit line into a discount of the same amount.
    inv = scene.world.invoices[("c", 1)]
    await sql(
        scene,
        "UPDATE invoice_line SET kind = 'DISCOUNT' "
        "WHERE invoice_id = :i AND kind = 'CREDIT_APPLIED'",
        i=inv,
    )
    lines = (await scene.check()).check("lines")
    assert lines.kinds() == {"lines_mismatch": 1}
    assert lines.ids("lines_mismatch") == [inv]


async def test_an_invoice_without_lines(scene: Scene) -> None:
    inv = scene.world.invoices[("e", 0)]
    await sql(scene, "DELETE FROM invoice_line WHERE invoice_id = :i", i=inv)
    lines = (await scene.check()).check("lines")
    assert lines.kinds() == {"no_lines": 1}
    assert lines.ids("no_lines") == [inv]


# -- stuck invoices ----------------------------------------------------------------------------


async def test_an_open_invoice_past_its_lease_and_retry_bound(scene: Scene) -> None:
    inv = scene.world.invoices[("e", 0)]
    now = scene.world.now
    await sql(scene, "UPDATE invoice SET next_attempt_at = :t WHERE id = :i", t=now, i=inv)
    assert (await scene.check(now=now + timedelta(minutes=16))).check("stuck").ok
    stuck = (await scene.check(now=now + timedelta(minutes=18))).check("stuck")
    assert stuck.ids("stuck_invoice") == [inv]
    await sql(scene, "UPDATE invoice SET next_attempt_at = NULL WHERE id = :i", i=inv)
    assert (await scene.check()).check("stuck").ids("unscheduled_invoice") == [inv]


async def test_an_open_invoice_held_for_reconciliation_is_not_stuck(scene: Scene) -> None:
    """Uncertain answers past their bound hold an invoice on purpose, announced by an event."""
    inv = scene.world.invoices[("e", 0)]
    await sql(scene, "UPDATE invoice SET next_attempt_at = NULL WHERE id = :i", i=inv)
    await sql(
        scene,
        "INSERT INTO outbox_event (event_id, aggregate_id, sequence, event_type, payload, "
        "occurred_at) VALUES (gen_random_uuid(), :s, 99, 'PaymentReconciliationNeeded', "
        "CAST(:p AS jsonb), now())",
        s=scene.world.subs["e"],
        p=f'{{"invoiceId": {inv}}}',
    )
    stuck = (await scene.check()).check("stuck")
    assert stuck.ok, stuck.violations
    assert stuck.notes == ["1 OPEN invoices held for reconciliation (uncertain results)"]


# -- history taken as given --------------------------------------------------------------------


async def test_history_before_since_needs_no_charge_and_no_event(scene: Scene) -> None:
    old = scene.world.invoices[("a", 0)]  # paid at the anchor, 75 days ago
    paid = scene.world.find("a", "InvoicePaid")
    ledger = LedgerEvidence({i: n for i, n in scene.world.charged.items() if i != old})
    topic = await scene.read([e for e in scene.world.published() if e is not paid])
    strict = await check_all(scene.pool, now=scene.world.now, ledger=ledger, topic=topic)
    assert strict.check("charges").ids("paid_without_charge") == [old]
    assert strict.check("events").ids("missing_InvoicePaid") == [old]
    given = await check_all(
        scene.pool,
        now=scene.world.now,
        ledger=ledger,
        topic=topic,
        since=scene.world.now - timedelta(days=1),
    )
    assert given.check("charges").ok
    # The outbox says it was published: losing it is still a violation, and a hole.
    assert given.check("events").kinds() == {"lost_event": 1}
    assert given.check("sequence").kinds() == {"sequence_hole": 1}


# -- refunds and reconciliation items ------------------------------------------------------------


async def add_refund(scene: Scene, name: str, period: int, key: str, status: str) -> None:
    """A SUCCESS attempt under ``key`` for the invoice's amount, and the refund of its charge,
    as the recorder writes them."""
    inv = scene.world.invoices[(name, period)]
    await sql(
        scene,
        "WITH a AS (INSERT INTO payment_attempt (invoice_id, attempt_number, idempotency_key, "
        "source, outcome, amount, currency) SELECT id, 0, :k, 'WEBHOOK', 'SUCCESS', amount, "
        "currency FROM invoice WHERE id = :i RETURNING id, amount, currency) "
        "INSERT INTO refund (invoice_id, subscription_id, payment_attempt_id, charge_key, "
        "idempotency_key, amount, currency, reason, status, requested_at) "
        "SELECT :i, :s, a.id, :k, 'ref-' || a.id, a.amount, a.currency, 'duplicate_charge', "
        ":status, now() FROM a",
        i=inv,
        s=scene.world.subs[name],
        k=key,
        status=status,
    )


async def add_item(scene: Scene, name: str, period: int, key: str, resolved: bool) -> None:
    await sql(
        scene,
        "INSERT INTO reconciliation_item (invoice_id, subscription_id, kind, reason, "
        "idempotency_key, created_at, resolved_at, resolved_by, resolution) "
        "VALUES (:i, :s, 'report_mismatch', 'report_mismatch: customer 5 is not 1', :k, now(), "
        ":at, :by, :how)",
        i=scene.world.invoices[(name, period)],
        s=scene.world.subs[name],
        k=key,
        at=scene.world.now if resolved else None,
        by="ops" if resolved else None,
        how="refunded by hand" if resolved else None,
    )


async def test_a_refunded_duplicate_is_not_a_double_charge(scene: Scene) -> None:
    inv = scene.world.invoices[("b", 1)]
    ledger = LedgerEvidence({**scene.world.charged, inv: 2}, [inv])
    await add_refund(scene, "b", 1, f"other-inv-{inv}-try-0", "FAILED")
    charges = (await scene.check(ledger=ledger)).check("charges")
    assert charges.ids("double_charge") == [inv]  # a refund the gateway refused gives nothing back
    await sql(scene, "UPDATE refund SET status = 'REQUESTED' WHERE invoice_id = :i", i=inv)
    charges = (await scene.check(ledger=ledger)).check("charges")
    assert charges.ok, charges.violations
    assert "1 charged more than they keep, refunded (or being refunded)" in charges.notes
    # A third charge is still one too many.
    ledger = LedgerEvidence({**scene.world.charged, inv: 3}, [inv])
    assert (await scene.check(ledger=ledger)).check("charges").ids("double_charge") == [inv]


async def test_money_on_a_closed_invoice_needs_a_refund_or_a_reconciliation_item(
    scene: Scene,
) -> None:
    failed = scene.world.invoices[("d", 0)]
    ledger = LedgerEvidence({**scene.world.charged, failed: 1})
    charges = (await scene.check(ledger=ledger)).check("charges")
    assert charges.ids("charged_not_paid") == [failed]
    assert "no refund and no reconciliation item" in str(charges.violations[0])

    await add_refund(scene, "d", 0, f"inv-{failed}-try-0", "SUCCEEDED")
    assert (await scene.check(ledger=ledger)).check("charges").ok
    await sql(scene, "UPDATE refund SET status = 'FAILED' WHERE invoice_id = :i", i=failed)
    assert (await scene.check(ledger=ledger)).check("charges").ids("charged_not_paid") == [failed]
    # The refund failed: its reconciliation item (open, or resolved by a person) accounts for it.
    await add_item(scene, "d", 0, f"inv-{failed}-try-0", resolved=False)
    assert (await scene.check(ledger=ledger)).check("charges").ok
    await sql(scene, "UPDATE reconciliation_item SET resolved_at = now(), resolved_by = 'ops'")
    assert (await scene.check(ledger=ledger)).check("charges").ok


async def test_a_mismatched_success_held_for_reconciliation_or_refunded_is_not_recorded_twice(
    scene: Scene,
) -> None:
    """A success under a key the invoice had not used when it was reported (its attempt only
    came later), or of another customer: rejected and held for a person, or refunded — not a
    second success the invoice kept."""
    inv = scene.world.invoices[("a", 2)]
    await sql(scene, "UPDATE invoice SET attempt_count = 1 WHERE id = :i", i=inv)
    await sql(
        scene,
        "INSERT INTO payment_attempt (invoice_id, attempt_number, idempotency_key, source, "
        "outcome, amount, currency) VALUES (:i, 1, :k, 'WEBHOOK', 'SUCCESS', 990, 'EUR')",
        i=inv,
        k=f"inv-{inv}-try-1",
    )
    assert (await scene.check()).check("charges").ids("double_charge_recorded") == [inv]
    await add_item(scene, "a", 2, f"inv-{inv}-try-1", resolved=False)
    assert (await scene.check()).check("charges").ids("double_charge_recorded") == []

    other = scene.world.invoices[("b", 1)]
    await add_refund(scene, "b", 1, f"inv-{other}-try-7", "REQUESTED")
    assert (await scene.check()).check("charges").ids("double_charge_recorded") == []
    await sql(scene, "DELETE FROM refund WHERE invoice_id = :i", i=other)
    assert (await scene.check()).check("charges").ids("double_charge_recorded") == [other]
