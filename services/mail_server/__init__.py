"""The development mail server: a real SMTP server (aiosmtpd) that keeps every message it
accepts as a file, for ``make up`` (where the notifier's e-mails can be read) and the tests."""
