"""Generated contract files: event schemas, the AsyncAPI document, docs/EVENTS.md, OpenAPI.

``billing contracts`` (``make contracts``) writes them; ``billing contracts --check`` and the
tests fail when a checked-in file differs from what the code generates.
"""
