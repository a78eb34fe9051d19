"""A mail server of the test's own: the project's ``billing mail-server`` (aiosmtpd) as a real
process on a free port, keeping what it receives in a directory the test reads."""

from __future__ import annotations

import email
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from email import policy
from email.message import EmailMessage
from email.parser import BytesHeaderParser
from pathlib import Path

from tests.support.processes import free_port

BIN = Path(sys.executable).parent


@dataclass
class MailServer:
    host: str
    port: int
    directory: Path
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        with (self.directory / "server.log").open("ab") as log:
            self.process = subprocess.Popen(
                [
                    str(BIN / "billing"),
                    "mail-server",
                    "--host",
                    self.host,
                    "--port",
                    str(self.port),
                    "--dir",
                    str(self.directory),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"mail server exited with {self.process.returncode}")
            with socket.socket() as sock:
                if sock.connect_ex((self.host, self.port)) == 0:
                    return
            time.sleep(0.05)
        raise RuntimeError("mail server did not open its port")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)
        self.process = None

    def _paths(self) -> list[Path]:
        """The received messages' files, in the order received."""
        new = self.directory / "new"
        return sorted(new.glob("*.eml"), key=lambda p: tuple(int(x) for x in p.name.split(".")[:3]))

    def count(self) -> int:
        return len(self._paths())

    def message_ids(self) -> list[str]:
        """The Message-ID of every message received so far (headers only: cheap to poll)."""
        parser = BytesHeaderParser(policy=policy.default)
        ids = []
        for path in self._paths():
            with path.open("rb") as file:
                ids.append(str(parser.parse(file)["Message-ID"]))
        return ids

    def collapsed(self) -> int:
        """How many copies of a message already in the mailbox the server acknowledged without
        storing them again (its ``mail_duplicate_collapsed`` log lines)."""
        log = self.directory / "server.log"
        return log.read_text().count("mail_duplicate_collapsed") if log.exists() else 0

    def messages(self) -> list[EmailMessage]:
        """Every message received so far, in the order received."""
        found = []
        for path in self._paths():
            parsed = email.message_from_bytes(path.read_bytes(), policy=policy.default)
            assert isinstance(parsed, EmailMessage)
            found.append(parsed)
        return found


@contextmanager
def mail_server(directory: Path) -> Iterator[MailServer]:
    server = MailServer("127.0.0.1", free_port(), directory)
    server.start()
    try:
        yield server
    finally:
        server.stop()
