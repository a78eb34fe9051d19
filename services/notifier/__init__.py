"""The e-mail notifier: a reference consumer of the billing events (it logs the e-mails)."""
