"""Operator tools: seeding, status, the demo."""
