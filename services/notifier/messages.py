"""The e-mails the notifier sends, as RFC 5322 messages: a receipt (InvoicePaid, with the
invoice's PDF attached), a payment failure (PaymentFailed) and a trial ending soon
(SubscriptionTrialWillEnd).

A message is built once, when its event is processed, and stored as bytes; every attempt sends
those same bytes. It is built with the standard library's MIME classes under the ``compat32``
policy with CRLF line ends, which store headers as given (a third of the CPU of the
``EmailMessage`` API, which parses every header it is set): a display name or subject outside
ASCII is encoded (RFC 2047) here. Its Message-ID comes from the event id, so if it ever reaches
a mailbox twice (a sender that died between the server's acceptance and recording it), both
copies are one message to mail clients.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from email import charset, policy
from email.header import Header
from email.message import Message
from email.mime.application import MIMEApplication
from email.mime.multipart import MIMEMultipart
from email.mime.nonmultipart import MIMENonMultipart
from email.utils import format_datetime, formataddr, parseaddr

from billing_core.documents import invoice_pdf
from billing_core.documents.invoice_view import InvoiceDocument
from billing_core.domain import event_payloads as p
from billing_core.domain.charge_result import AUTHENTICATION_REQUIRED
from billing_core.domain.money import format_minor
from billing_core.repo.invoice_documents import Recipient

SENT = frozenset({"InvoicePaid", "PaymentFailed", "SubscriptionTrialWillEnd"})

_POLICY = policy.compat32.clone(linesep="\r\n")
_UTF8 = charset.Charset("utf-8")
_UTF8.body_encoding = charset.QP


def _header(text: str) -> str:
    return text if text.isascii() else Header(text, "utf-8").encode()


@dataclass(frozen=True)
class Composer:
    mail_from: str  # "Name <address>"
    seller_name: str

    @property
    def domain(self) -> str:
        address = parseaddr(self.mail_from)[1]
        return address.rpartition("@")[2] or "localhost"

    def message_id(self, event_id: str) -> str:
        return f"<{event_id}@{self.domain}>"

    def _message(
        self,
        *,
        event_id: str,
        to: Recipient,
        subject: str,
        sent_at: datetime,
        body: str,
        attachment: MIMENonMultipart | None = None,
    ) -> Message:
        assert to.email is not None
        greeting = f"Hello {to.name}," if to.name else "Hello,"
        text = MIMENonMultipart("text", "plain", charset="utf-8")
        text.set_payload(f"{greeting}\n\n{body}\n\n{self.seller_name}\n", _UTF8)
        message: Message = text
        if attachment is not None:
            message = MIMEMultipart(policy=_POLICY)
            message.attach(text)
            message.attach(attachment)
        message.policy = _POLICY
        name, address = parseaddr(self.mail_from)
        message["From"] = formataddr((name, address), charset="utf-8")
        message["To"] = formataddr((to.name or "", to.email), charset="utf-8")
        message["Subject"] = _header(subject)
        message["Date"] = format_datetime(sent_at)
        message["Message-ID"] = self.message_id(event_id)
        message["Auto-Submitted"] = "auto-generated"
        return message

    def receipt(
        self,
        *,
        event_id: str,
        to: Recipient,
        subject: str,
        payload: p.InvoicePaidV1,
        document: InvoiceDocument,
    ) -> Message:
        paid = format_minor(payload.amount, payload.currency)
        body = (
            f"We received your payment of {paid} for invoice {document.reference} "
            f"on {payload.paidAt:%Y-%m-%d %H:%M} UTC, for the period "
            f"{document.period_start:%Y-%m-%d} to {document.period_end:%Y-%m-%d}.\n"
            "The invoice is attached as a PDF."
        )
        pdf = MIMEApplication(invoice_pdf.render(document), "pdf", policy=_POLICY)
        pdf.add_header(
            "Content-Disposition",
            "attachment",
            filename=f"invoice-{document.number or document.invoice_id}.pdf",
        )
        return self._message(
            event_id=event_id,
            to=to,
            subject=subject,
            sent_at=payload.paidAt,
            body=body,
            attachment=pdf,
        )

    def payment_failed(
        self,
        *,
        event_id: str,
        to: Recipient,
        subject: str,
        payload: p.PaymentFailedV1,
        document: InvoiceDocument | None,
        occurred_at: datetime,
    ) -> Message:
        what = f"invoice #{payload.invoiceId}"
        if document is not None:
            what += f" ({document.money(document.total)})"
        lines = [f"We could not take the payment for {what}."]
        if payload.declineCode == AUTHENTICATION_REQUIRED:
            lines.append("Your bank asks you to confirm the payment: please contact us.")
        elif payload.declineCode:
            lines.append(f"The bank's answer: {payload.declineCode}.")
        if payload.nextAttemptAt is not None:
            lines.append(
                f"We will try again on {payload.nextAttemptAt:%Y-%m-%d %H:%M} UTC; please make "
                "sure your payment method can be charged."
            )
        else:
            lines.append("This was the last attempt: please update your payment method.")
        return self._message(
            event_id=event_id, to=to, subject=subject, sent_at=occurred_at, body="\n".join(lines)
        )

    def trial_will_end(
        self,
        *,
        event_id: str,
        to: Recipient,
        subject: str,
        payload: p.SubscriptionTrialWillEndV1,
        occurred_at: datetime,
    ) -> Message:
        body = (
            f"Your free trial ends on {payload.trialEnd:%Y-%m-%d %H:%M} UTC. Your subscription "
            "then continues and its first period is invoiced; cancel before then if you do not "
            "want to continue."
        )
        return self._message(
            event_id=event_id, to=to, subject=subject, sent_at=occurred_at, body=body
        )
