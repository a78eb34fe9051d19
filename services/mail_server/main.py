"""``billing mail-server``: an SMTP server on loopback that stores what it receives.

Each accepted message is written to ``DIR/new/`` as one ``.eml`` file (the bytes received, with
a ``X-Billing-Envelope-To`` header added on top naming the envelope recipients), the way a
Maildir does it: written under ``DIR/tmp/``, flushed, then renamed, so a reader never sees half a
message. The server answers 250 to the end of the data only after the file is in place, so a
message it acknowledged is on disk. Development and tests only: no authentication, no relaying.

Like a mailbox provider that collapses copies of one message (Gmail does, by Message-ID), a
message whose Message-ID and envelope recipients it already holds is acknowledged but not stored
again (``mail_duplicate_collapsed``, counted in ``duplicates``): a sender that crashed after the
server accepted a message and before it recorded that sends the same bytes again, and the
recipient still sees one e-mail. The marker of a stored message (``ids/``) names its file, and a
marker whose file is missing (a crash between the two) does not count.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import logging
import os
import signal
import time
from email import policy
from email.parser import BytesHeaderParser
from pathlib import Path
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import Envelope, Session

from billing_core.logging import get_logger

log = get_logger(__name__)

# aiosmtpd logs every SMTP command at INFO.
logging.getLogger("mail.log").setLevel(logging.WARNING)

# aiosmtpd's default limit is 32 MiB; invoices with their PDF are a few kB.
MAX_MESSAGE_BYTES = 10 * 1024 * 1024


class MaildirHandler:
    """aiosmtpd handler: every message to ``directory/new`` as an ``.eml`` file."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._tmp = directory / "tmp"
        self._new = directory / "new"
        self._ids = directory / "ids"
        for sub in (self._tmp, self._new, self._ids):
            sub.mkdir(parents=True, exist_ok=True)
        self._seq = itertools.count(1)
        self.received = 0
        self.duplicates = 0
        self._storing = asyncio.Lock()  # one message stored at a time: a copy sees the first

    def _marker(self, envelope: Envelope, content: bytes) -> Path | None:
        """Where the marker of this message for these recipients lives (None: no Message-ID)."""
        message_id = BytesHeaderParser(policy=policy.compat32).parsebytes(content)["Message-ID"]
        if not message_id:
            return None
        key = "\n".join([str(message_id).strip(), *sorted(envelope.rcpt_tos)])
        return self._ids / hashlib.sha256(key.encode()).hexdigest()

    def _held(self, marker: Path | None) -> bool:
        if marker is None or not marker.exists():
            return False
        return (self._new / marker.read_text()).exists()

    def _store(self, envelope: Envelope) -> Path | None:
        """The stored file, or None when the mailbox already holds this message."""
        content = envelope.original_content or b""
        marker = self._marker(envelope, content)
        if self._held(marker):
            return None
        name = f"{time.time_ns()}.{os.getpid()}.{next(self._seq)}.eml"
        header = f"X-Billing-Envelope-To: {', '.join(envelope.rcpt_tos)}\r\n".encode()
        tmp = self._tmp / name
        with tmp.open("wb") as out:
            out.write(header + content)
            out.flush()
            os.fsync(out.fileno())
        final = self._new / name
        tmp.rename(final)
        if marker is not None:
            marker.write_text(name)
        return final

    async def handle_RCPT(
        self, server: Any, session: Session, envelope: Envelope, address: str, options: list[str]
    ) -> str:
        # Like a real server that cannot route it: a domain of the reserved .invalid TLD (or no
        # domain at all) is refused for good, so senders can see a permanent failure.
        domain = address.rpartition("@")[2].lower()
        if "@" not in address or domain == "invalid" or domain.endswith(".invalid"):
            return "550 5.1.2 Bad destination mailbox address: no such domain"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Session, envelope: Envelope) -> str:
        async with self._storing:
            path = await asyncio.to_thread(self._store, envelope)
        if path is None:
            self.duplicates += 1
            log.info(
                "mail_duplicate_collapsed",
                mail_from=envelope.mail_from,
                rcpt_to=list(envelope.rcpt_tos),
                duplicates=self.duplicates,
            )
            return "250 Message accepted for delivery (already in the mailbox)"
        self.received += 1
        log.info(
            "mail_received",
            mail_from=envelope.mail_from,
            rcpt_to=list(envelope.rcpt_tos),
            size=len(envelope.original_content or b""),
            file=path.name,
        )
        return "250 Message accepted for delivery"


def serve(host: str, port: int, directory: Path) -> None:
    """Run until SIGTERM or SIGINT."""
    handler = MaildirHandler(directory)
    controller = Controller(
        handler, hostname=host, port=port, data_size_limit=MAX_MESSAGE_BYTES, decode_data=False
    )
    controller.start()
    log.info("mail_server_started", host=host, port=port, directory=str(directory))
    stopped = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopped
        stopped = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        while not stopped:
            time.sleep(0.2)
    finally:
        controller.stop()
        log.info("mail_server_stopped", received=handler.received, duplicates=handler.duplicates)
