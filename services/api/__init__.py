"""The HTTP API: subscriptions, plan changes, cancels, and the payment gateway's webhooks."""
