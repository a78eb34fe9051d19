"""The outbox relay: publishes ``outbox_event`` rows to Kafka as CloudEvents, in order."""
