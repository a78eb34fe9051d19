"""A small consistent billing world written straight with SQL, and its events on a real topic.

Every subscription gets the rows the services would have written: its RENEWAL invoice for each
period 0..current (bounds from the domain's period functions), payment attempts, credit
entries, outbox events with per-subscription sequences — and the same events as CloudEvents
records on a test topic. The gateway ledger is the snapshot of the successful charges.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from billing_core.cloudevents import encode_headers, encode_key
from billing_core.db import pg
from billing_core.domain.charge_result import idempotency_key
from billing_core.domain.invoice_lines import LineKind, credit_line, period_lines, single
from billing_core.domain.period import Interval, period_bounds, period_index_at
from billing_core.domain.proration import prorate
from billing_core.invariants.ledger import LedgerEvidence
from billing_core.repo.invoice_lines import insert_lines
from tests.support.factories import ensure_customers

PRICES = {"BASIC_MONTHLY": 990, "PRO_MONTHLY": 2990}


@dataclass
class Event:
    event_id: uuid.UUID
    subscription_id: int
    sequence: int
    event_type: str
    payload: dict[str, object]
    published: bool = True


@dataclass
class World:
    now: datetime
    events: list[Event] = field(default_factory=list)
    charged: dict[int, int] = field(default_factory=dict)  # invoice -> successful charges
    subs: dict[str, int] = field(default_factory=dict)
    invoices: dict[tuple[str, int], int] = field(default_factory=dict)  # (sub, period) -> id
    proration: int = 0
    anchors: dict[str, datetime] = field(default_factory=dict)
    current: dict[str, int] = field(default_factory=dict)

    # -- building ---------------------------------------------------------------------------

    async def build(self, pool: pg.Pool) -> None:
        now = self.now
        async with pg.transaction(pool) as conn:
            # Paid every period since ~2.5 months ago.
            await self._subscription(conn, "a", "BASIC_MONTHLY", now - timedelta(days=75))
            for n in range(self._periods("a") + 1):
                await self._renewal(conn, "a", n, "BASIC_MONTHLY", paid=True)
            # Upgraded from BASIC to PRO half-way through period 0; period 1 at the PRO price.
            await self._subscription(conn, "b", "BASIC_MONTHLY", now - timedelta(days=40))
            await self._renewal(conn, "b", 0, "BASIC_MONTHLY", paid=True)
            await self._upgrade(conn, "b", "BASIC_MONTHLY", "PRO_MONTHLY")
            for n in range(1, self._periods("b") + 1):
                await self._renewal(conn, "b", n, "PRO_MONTHLY", paid=True)
            # Credit granted, then consumed by period 1: nothing left to charge (PAID, amount 0).
            c = await self._subscription(conn, "c", "BASIC_MONTHLY", now - timedelta(days=35))
            await self._renewal(conn, "c", 0, "BASIC_MONTHLY", paid=True)
            await self._credit(conn, c, 1500, "ADJUSTMENT", None)
            await self._renewal(conn, "c", 1, "BASIC_MONTHLY", paid=True, credit=990)
            # Four declines: invoice FAILED, subscription CANCELED for non-payment.
            d = await self._subscription(conn, "d", "BASIC_MONTHLY", now - timedelta(days=20))
            inv = await self._renewal(conn, "d", 0, "BASIC_MONTHLY", paid=False)
            for attempt in range(4):
                await self._attempt(conn, inv, attempt, "DECLINED", 990)
            await pg.execute(
                conn,
                pg.Statement(
                    "UPDATE invoice SET status = 'FAILED', attempt_count = 4, "
                    "next_attempt_at = NULL, closed_at = :now WHERE id = :id"
                ),
                {"now": now, "id": inv},
            )
            await self._set(conn, d, status="CANCELED", canceled_at=now - timedelta(days=1))
            self._event(d, "PaymentFailed", {"invoiceId": inv, "attempt": 4})
            self._event(d, "SubscriptionCanceled", {"reason": "nonpayment"})
            # One decline: PAST_DUE, next try tomorrow.
            e = await self._subscription(conn, "e", "BASIC_MONTHLY", now - timedelta(days=3))
            inv = await self._renewal(conn, "e", 0, "BASIC_MONTHLY", paid=False)
            await self._attempt(conn, inv, 0, "DECLINED", 990)
            await pg.execute(
                conn,
                pg.Statement(
                    "UPDATE invoice SET attempt_count = 1, next_attempt_at = :next WHERE id = :id"
                ),
                {"next": now + timedelta(days=1), "id": inv},
            )
            await self._set(conn, e, status="PAST_DUE")
            self._event(e, "PaymentFailed", {"invoiceId": inv, "attempt": 1})
            self._event(e, "SubscriptionPastDue", {"invoiceId": inv})
            await self.store_events(conn)

    def _periods(self, name: str) -> int:
        return self.current[name]

    async def _subscription(
        self, conn: pg.Connection, name: str, plan: str, anchor: datetime
    ) -> int:
        index = period_index_at(anchor, Interval.MONTH, "UTC", self.now)
        period = period_bounds(anchor, Interval.MONTH, index, "UTC")
        customer = 100 + len(self.subs)
        await ensure_customers(conn, [customer])
        sub = int(
            await pg.fetchval(
                conn,
                pg.Statement(
                    """
                        INSERT INTO subscription (customer_id, plan_id, status, time_zone,
                            billing_anchor, period_index, current_period_start,
                            current_period_end, created_at, updated_at)
                        VALUES (:customer, (SELECT id FROM plan WHERE code = :plan), 'ACTIVE',
                            'UTC', :anchor, :index, :start, :end, :anchor, :anchor)
                        RETURNING id
                        """
                ),
                {
                    "customer": customer,
                    "plan": plan,
                    "anchor": anchor,
                    "index": index,
                    "start": period.start,
                    "end": period.end,
                },
            )
        )
        self.subs[name] = sub
        self.anchors[name] = anchor
        self.current[name] = index
        self._event(sub, "SubscriptionCreated", {"planCode": plan})
        return sub

    async def _renewal(
        self,
        conn: pg.Connection,
        name: str,
        n: int,
        plan: str,
        *,
        paid: bool,
        credit: int = 0,
    ) -> int:
        sub = self.subs[name]
        period = period_bounds(self.anchors[name], Interval.MONTH, n, "UTC")
        price = PRICES[plan]
        amount = price - credit
        inv = await self._invoice(
            conn, sub, "RENEWAL", n, period.start, period.end, price, credit, paid=paid
        )
        self.invoices[(name, n)] = inv
        if credit:
            await self._credit(conn, sub, -credit, "INVOICE", inv)
        if paid and amount > 0:
            await self._attempt(conn, inv, 0, "SUCCESS", amount)
            self.charged[inv] = 1
        return inv

    async def _upgrade(self, conn: pg.Connection, name: str, old: str, new: str) -> None:
        sub = self.subs[name]
        period = period_bounds(self.anchors[name], Interval.MONTH, 0, "UTC")
        at = period.start + (period.end - period.start) / 2
        due = prorate(PRICES[old], PRICES[new], period, at).due
        await pg.execute(
            conn,
            pg.Statement(
                "UPDATE subscription SET plan_id = (SELECT id FROM plan WHERE code = :p) "
                "WHERE id = :id"
            ),
            {"p": new, "id": sub},
        )
        self._event(
            sub,
            "SubscriptionPlanChanged",
            {
                "oldPlanCode": old,
                "newPlanCode": new,
                "prorationDue": due,
                "changedAt": at.isoformat(),
            },
        )
        self.proration = await self._invoice(
            conn, sub, "PRORATION", 0, at, period.end, due, 0, paid=True
        )
        await self._attempt(conn, self.proration, 0, "SUCCESS", due)
        self.charged[self.proration] = 1

    async def _invoice(
        self,
        conn: pg.Connection,
        sub: int,
        kind: str,
        n: int,
        start: datetime,
        end: datetime,
        subtotal: int,
        credit: int,
        *,
        paid: bool,
    ) -> int:
        amount = subtotal - credit
        inv = int(
            await pg.fetchval(
                conn,
                pg.Statement(
                    """
                        INSERT INTO invoice (subscription_id, customer_id, kind, period_index,
                            period_start, period_end, subtotal, credit_applied, amount,
                            currency, status, next_attempt_at, paid_at)
                        SELECT :sub, customer_id, :kind, :n, :start, :end, :subtotal, :credit,
                               :amount, 'EUR', :status, :next, :paid_at
                        FROM subscription WHERE id = :sub
                        RETURNING id
                        """
                ),
                {
                    "sub": sub,
                    "kind": kind,
                    "n": n,
                    "start": start,
                    "end": end,
                    "subtotal": subtotal,
                    "credit": credit,
                    "amount": amount,
                    "status": "PAID" if paid else "OPEN",
                    "next": None if paid else start,
                    "paid_at": start if paid else None,
                },
            )
        )
        lines = (
            period_lines("PLAN", subtotal, start, end, credit)
            if kind == "RENEWAL"
            else [single(LineKind.PRORATION_CHARGE, "Plan change", subtotal), *credit_line(credit)]
        )
        await insert_lines(conn, [(inv, lines)])
        self._event(sub, "InvoiceCreated", {"invoiceId": inv, "kind": kind, "amount": amount})
        if paid:
            self._event(sub, "InvoicePaid", {"invoiceId": inv, "amount": amount})
        return inv

    async def _attempt(
        self, conn: pg.Connection, inv: int, attempt: int, outcome: str, amount: int
    ) -> None:
        await pg.execute(
            conn,
            pg.Statement(
                """
                INSERT INTO payment_attempt (invoice_id, attempt_number, idempotency_key, source,
                    outcome, amount, currency)
                VALUES (:inv, :n, :key, 'COLLECTOR', :outcome, :amount, 'EUR')
                """
            ),
            {
                "inv": inv,
                "n": attempt,
                "key": idempotency_key(inv, attempt),
                "outcome": outcome,
                "amount": amount,
            },
        )

    async def _credit(
        self, conn: pg.Connection, sub: int, amount: int, reason: str, inv: int | None
    ) -> None:
        await pg.execute(
            conn,
            pg.Statement(
                "INSERT INTO credit_entry (subscription_id, amount, reason, invoice_id) "
                "VALUES (:sub, :amount, :reason, :inv)"
            ),
            {"sub": sub, "amount": amount, "reason": reason, "inv": inv},
        )
        await pg.execute(
            conn,
            pg.Statement(
                "UPDATE subscription SET credit_balance = credit_balance + :a WHERE id = :s"
            ),
            {"a": amount, "s": sub},
        )

    async def _set(self, conn: pg.Connection, sub: int, **values: object) -> None:
        assignments = ", ".join(f"{k} = :{k}" for k in values)
        await pg.execute(
            conn,
            pg.Statement(f"UPDATE subscription SET {assignments} WHERE id = :id"),
            {**values, "id": sub},
        )

    def _event(self, sub: int, event_type: str, payload: dict[str, object]) -> Event:
        sequence = 1 + sum(1 for e in self.events if e.subscription_id == sub)
        event = Event(uuid.uuid4(), sub, sequence, event_type, {"subscriptionId": sub, **payload})
        self.events.append(event)
        return event

    async def store_events(self, conn: pg.Connection) -> None:
        for event in self.events:
            await pg.execute(
                conn,
                pg.Statement(
                    """
                    INSERT INTO outbox_event (event_id, aggregate_id, sequence, event_type,
                        payload, occurred_at, created_at, published_at)
                    VALUES (:id, :sub, :seq, :type, CAST(:payload AS jsonb), :now, :now,
                        :published)
                    """
                ),
                {
                    "id": event.event_id,
                    "sub": event.subscription_id,
                    "seq": event.sequence,
                    "type": event.event_type,
                    "payload": json.dumps(event.payload),
                    "now": self.now,
                    "published": self.now if event.published else None,
                },
            )
        await pg.execute(
            conn,
            pg.Statement(
                "UPDATE subscription s SET event_seq = m.n FROM (SELECT aggregate_id, "
                "max(sequence) AS n FROM outbox_event GROUP BY aggregate_id) m "
                "WHERE m.aggregate_id = s.id"
            ),
        )

    # -- evidence ---------------------------------------------------------------------------

    def ledger(self) -> LedgerEvidence:
        return LedgerEvidence(dict(self.charged))

    def find(self, sub: str, event_type: str, nth: int = 0) -> Event:
        found = [
            e
            for e in self.events
            if e.subscription_id == self.subs[sub] and e.event_type == event_type
        ]
        return found[nth]

    async def publish(self, bootstrap: str, topic: str, events: list[Event] | None = None) -> None:
        """Produce ``events`` (default: every published one, in order) to a new topic."""
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])
        finally:
            await admin.close()
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
        await producer.start()
        try:
            for event in events if events is not None else self.published():
                await producer.send_and_wait(
                    topic,
                    value=json.dumps(event.payload).encode(),
                    key=encode_key(event.subscription_id),
                    headers=encode_headers(
                        event_id=event.event_id,
                        event_type=event.event_type,
                        occurred_at=self.now,
                        subscription_id=event.subscription_id,
                        sequence=event.sequence,
                        schema_version=1,
                    ),
                )
        finally:
            await producer.stop()

    def published(self) -> list[Event]:
        return [e for e in self.events if e.published]
