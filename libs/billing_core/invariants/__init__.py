"""Independent evidence that the two hard rules held: never charge twice, never skip a period.

Evidence comes from three places that do not trust each other: PostgreSQL (invoices, periods,
credit), the payment gateway's own ledger (what was really charged) and the Kafka topic (what
other systems were told). ``check_all`` gathers them and returns a :class:`Report`.
"""
