"""``billing mail-server``: an SMTP server on loopback that stores what it receives.

Each accepted message is written to ``DIR/new/`` as one ``.eml`` file (the bytes received, with
a ``X-Billing-Envelope-To`` header added on top naming the envelope recipients), the way a
Maildir does it: written under ``DIR/tmp/``, flushed, then renamed, so a reader never sees half a
message. The server answers 250 to the end of the data only after the file is in place, so a
message it acknowledged is on disk. Development and tests only: no authentication, no relaying.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import signal
import time
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
        self._tmp.mkdir(parents=True, exist_ok=True)
        self._new.mkdir(parents=True, exist_ok=True)
        self._seq = itertools.count(1)
        self.received = 0

    def _store(self, envelope: Envelope) -> Path:
        name = f"{time.time_ns()}.{os.getpid()}.{next(self._seq)}.eml"
        content = envelope.original_content or b""
        header = f"X-Billing-Envelope-To: {', '.join(envelope.rcpt_tos)}\r\n".encode()
        tmp = self._tmp / name
        with tmp.open("wb") as out:
            out.write(header + content)
            out.flush()
            os.fsync(out.fileno())
        final = self._new / name
        tmp.rename(final)
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
        path = await asyncio.to_thread(self._store, envelope)
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
        log.info("mail_server_stopped", received=handler.received)
