"""The operator console: server-rendered pages under ``/console`` (overview of the 1st of the
month, a subscription's story, the reconciliation queue), readable without JavaScript."""
