"""A stand-in for the external payment gateway: the gateway HTTP contract, its idempotency store,
rate limit, failure modes and signed webhooks, plus an audit ledger. See docs/GATEWAY_SIMULATOR.md.
"""
