"""Independent evidence that the two hard rules held: never charge twice, never skip a period.

Evidence comes from three places that do not trust each other: PostgreSQL (invoices, periods,
credit), the payment gateway's own ledger (what was really charged) and the Kafka topic (what
other systems were told). ``checker.check_all`` runs every invariant on given evidence and
returns a :class:`report.Report`; ``checker.run_checker`` gathers the evidence first. One module
per invariant: ``periods``, ``charges``, ``events`` (events and sequences), ``amounts``,
``stuck``; the evidence readers are ``ledger`` and ``topic``.
"""
